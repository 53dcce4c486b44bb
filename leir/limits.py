"""What the checker accepts: the largest loops, tensors and programs.

A program past one of these limits is reported (an error at the offending
token, with the limit in the message) and goes no further: hover, code
actions and transformations only work on programs without errors. Within
them, every pass downstream (analysis, hover's facts, the candidate steps and
their factor choices) is bounded in time: the limits are chosen so that no
pass has to be written with giant inputs in mind.

- ``MAX_EXTENT``: a loop's extent, and the largest value its variable takes
  (start + extent - 1); a tensor dimension; an integer written in an index.
  2^31 - 1 is TVM's default index type (int32): ``T.serial(n)`` with a
  larger ``n`` makes an int64 loop variable that meets int32 buffer shapes
  and thread indices (CUDA's ``blockIdx.x`` limit is the same 2^31 - 1), and
  it keeps divisor enumeration of an extent at most 46,341 trial divisions.
- ``MAX_ITERATIONS``: the iterations of one equation (the product of its
  enclosing loops' extents), and ``MAX_ELEMENTS``, the elements of one
  tensor: 2^62, so that both fit the int64 counters and offsets of TVM and
  NumPy with room to add; a nest of more iterations would not finish in
  a century anyway.
- ``MAX_RANK``: indices of one access and dimensions of one tensor: 32,
  NumPy 1.x's largest rank (the evaluator holds every tensor as an array).
- ``MAX_LOOP_DEPTH``: loops enclosing one equation, across nested bodies:
  64 (the deepest schedule of the examples, conv2d tiled three times, has
  under 30); passes over an equation's loops are quadratic in it.
- ``MAX_EXPR_NODES``: operations and operands of one equation's
  right-hand side and guard: 256, about seven times the largest equation of
  the examples (38). The catalogue's subexpression searches (precompute,
  expression splitting, common subexpressions) grow with the cube of it:
  128 terms summed took 3.8 s to list, 199 terms 15 s.
- Expression depth and bracket nesting: ``leir.parser.MAX_EXPR_DEPTH`` and
  ``MAX_NESTING`` (the parser and the tree walks recurse once per level).
- ``MAX_STATEMENTS``: equations in one program: 50,000, about 200,000
  lines, past the 8 MiB a document may have (``leir.bridge.document``) for any
  sensible layout; it bounds the passes that compare equations pairwise.
"""

from __future__ import annotations

MAX_EXTENT = 2**31 - 1
MAX_ITERATIONS = 2**62
MAX_ELEMENTS = 2**62
MAX_RANK = 32
MAX_LOOP_DEPTH = 64
MAX_EXPR_NODES = 256
#: An integer exponent (``x**N``): 1024. The algebraic steps expand powers
#: exactly with SymPy, where a rational to a huge integer power does not
#: finish (found by bench/fuzz_documents.py: ``0.7071**067811865476``).
MAX_EXPONENT = 1024
MAX_STATEMENTS = 50_000


def power_text(n: int) -> str:
    """``2^31-1`` for 2147483647, ``2^62`` for 4611686018427387904."""
    if n > 0 and n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}"
    if n > 0 and (n + 1) & n == 0:
        return f"2^{n.bit_length()}-1"
    return str(n)
