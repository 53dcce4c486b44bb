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

#: A TVMScript kernel in a Python file: B = 2 * A over a 64 x 32 grid.
SCALE_TVMSCRIPT = '''\
from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def scale(A: T.Buffer((64, 32), "float32"), B: T.Buffer((64, 32), "float32")):
    T.func_attr({"tir.noalias": True})
    for i, j in T.grid(64, 32):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] * T.float32(2.0)
'''

#: A softmax in three nests (max, sum of exponentials, normalise), 16 x 10.
SOFTMAX = """\
L^{16}_{i}
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Z_{i} += exp(X_{i,j} - M_{i});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
  ];
"""
