"""Small LEIR programs several test modules share."""

#: A transpose: quick to build and verify on a loaded machine.
TRANSPOSE = """\
# Y = X.T
L^{32}_{i}
  L^{16}_{j} [
    Y_{i,j} = X_{j,i};
  ];
"""

#: A step that applies to TRANSPOSE: loop i split into 4 x 8.
SPLIT_I = {"id": "split", "args": {"block": "Y", "loop": "i", "factors": [4, 8]}}
