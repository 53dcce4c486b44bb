"""How an equation's value is typed: the rules the TVM lowering
(``leir.bridge.lower``) and the NumPy evaluator (``leir.evaluate``) both follow, so
that the two compute the same thing.

docs/leir-syntax.md says the value is computed in the written tensor's
dtype and that reads of other dtypes are cast. In detail:

- **Context dtype.** Every expression is computed in a context dtype: the
  written tensor's dtype for the right-hand side and the guard, the cast's
  dtype inside a cast ``f16(e)`` (whose result is then converted to the
  enclosing context). Tensor reads are converted to the context dtype and
  literals are typed in it.
- **Integer index expressions.** A subexpression made only of loop
  variables, integer literals and ``+ - * // %`` is evaluated exactly in
  integers (as an index is) and then converted to the context dtype, so
  ``X_{i}*(i % 2)`` and ``Y_{i} = i // 2`` mean what they say in a float
  equation. Such expressions compared with each other (``io*32+ii < 100``)
  are compared as integers.
- **Division.** ``/`` is true division for floats and truncating division
  for integers (C, and TVM's ``Div``); ``//`` and ``%`` are floor division and
  modulo for both (for floats, ``floor(a/b)`` and ``a - floor(a/b)*b``).
- **Conditions.** Comparisons, ``&``, ``|`` and ``!`` give booleans; a
  boolean used as a number is 0 or 1, a number used as a condition is
  "not zero".
- **Float-only functions** (``exp log sqrt rsqrt erf tanh sigmoid pow`` and
  ``**``) need a floating-point context: in an integer equation, wrap them in
  a cast, e.g. ``f32(exp(X_{i}))``. ``floor`` and ``ceil`` of an integer are
  the integer itself.
- **Literals** must be representable in their context: ``0.5`` or ``inf``
  in an integer context is an error.
- **Boolean tensors** are written only with conditions, boolean reads or
  ``if_then_else`` of those; a comparison in a bool equation computes its
  operands in the dtype of the first tensor it reads.
"""

from __future__ import annotations

import math

from leir import ast as A
from leir.errors import LeirError

FLOAT_FUNCTIONS = frozenset({"exp", "log", "sqrt", "rsqrt", "erf", "tanh", "sigmoid", "pow"})
INDEX_OPERATORS = frozenset({"+", "-", "*", "//", "%"})
ARITHMETIC = frozenset({"+", "-", "*", "/", "//", "%", "**"})


class TypeRuleError(LeirError, ValueError):
    """An expression the typing rules above do not give a meaning to."""


def is_index_expr(e: A.Expr) -> bool:
    """Loop variables and integer literals under ``+ - * // %`` only."""
    if isinstance(e, A.Var):
        return True
    if isinstance(e, A.Num):
        return isinstance(e.value, int)
    if isinstance(e, A.Unary):
        return e.op == "-" and is_index_expr(e.operand)
    if isinstance(e, A.Binary):
        return e.op in INDEX_OPERATORS and is_index_expr(e.lhs) and is_index_expr(e.rhs)
    return False


def is_condition(e: A.Expr) -> bool:
    """Whether ``e`` yields a boolean by its shape (a comparison, ``&``,
    ``|`` or ``!``)."""
    if isinstance(e, A.Binary):
        return e.op in A.COMPARISONS or e.op in A.LOGICAL
    return isinstance(e, A.Unary) and e.op == "!"


def is_cast(e: A.Expr) -> bool:
    return isinstance(e, A.Call) and e.func in A.DTYPES


def is_float_dtype(dtype: str) -> bool:
    return dtype.startswith(("f", "bf"))


def is_integer_dtype(dtype: str) -> bool:
    return dtype.startswith(("i", "u"))


def literal(num: A.Num, dtype: str) -> int | float | bool:
    """The value of a literal in a context dtype."""
    if dtype == "bool":
        if num.value in (0, 1):
            return bool(num.value)
        raise TypeRuleError(f"literal {num.text} in a bool context: only 0 and 1 are booleans")
    if is_integer_dtype(dtype):
        if isinstance(num.value, int):
            return num.value
        if math.isfinite(num.value) and float(num.value).is_integer():
            return int(num.value)
        raise TypeRuleError(f"literal {num.text} in an {dtype} computation is not an integer; "
                            f"cast the part that needs it, e.g. f32(...)")
    return float(num.value)


def check_float_function(name: str, dtype: str) -> None:
    if name in FLOAT_FUNCTIONS and not is_float_dtype(dtype):
        shown = "**" if name == "pow" else name
        raise TypeRuleError(f"{shown} computes in floating point, but this part of the equation computes in {dtype}; "
                            f"wrap it in a cast such as f32(...)")


def check_arithmetic(op: str, dtype: str) -> None:
    if dtype == "bool":
        raise TypeRuleError(f"'{op}' on booleans: a bool tensor is written with comparisons, &, | and !")
    if op == "**":
        check_float_function("pow", dtype)


def index_error(e: A.Expr, tensor: str) -> TypeRuleError:
    from leir.printer import print_expr

    return TypeRuleError(f"index {print_expr(e, index=True)} of {tensor} is not an integer expression "
                         f"of loop variables (+ - * // % and integer literals)")


def reduction_identity(combiner: str, dtype: str, dtype_min: int | float, dtype_max: int | float) -> int | float | bool:
    """The implied initial value of a reduction: 0, 1, -inf/+inf (for
    integers the dtype's minimum/maximum)."""
    if combiner == "sum":
        return False if dtype == "bool" else 0
    if combiner == "prod":
        return True if dtype == "bool" else 1
    if dtype == "bool":
        return combiner == "min"
    if is_float_dtype(dtype):
        return -math.inf if combiner == "max" else math.inf
    return dtype_min if combiner == "max" else dtype_max


def comparison_dtype(e: A.Binary, context: str, tensors: dict) -> str:
    """The dtype a comparison's operands compute in: the context's, except
    in a bool context, which has no numbers: there, the dtype of the first
    tensor the comparison reads (f64 if it reads none)."""
    if context != "bool":
        return context
    for node in A.walk(e):
        if isinstance(node, A.Access):
            return tensors[node.tensor].dtype
    return "f64"


def type_errors(e: A.Expr, context: str, tensors: dict) -> list[tuple[A.Expr, str]]:
    """(node, message) for every part of ``e`` that these rules give no
    meaning to, computing in ``context`` — what the checker reports before
    lowering or evaluation would refuse the equation."""
    found: list[tuple[A.Expr, str]] = []

    def visit(node: A.Expr, dtype: str) -> None:
        try:
            if isinstance(node, A.Num):
                literal(node, dtype)
            elif isinstance(node, A.Call):
                if node.func in A.DTYPES:  # a cast: its argument computes in the cast's dtype
                    for arg in node.args:
                        visit(arg, node.func)
                    return
                check_float_function(node.func, dtype)
                if node.func == "if_then_else" and node.args:
                    visit_condition(node.args[0], dtype)
                    for arg in node.args[1:]:
                        visit(arg, dtype)
                    return
            elif isinstance(node, A.Binary):
                if node.op in COMPARISONS_AND_LOGIC:
                    visit_condition(node, dtype)
                    return
                if not is_index_expr(node):
                    check_arithmetic(node.op, dtype)
            elif isinstance(node, A.Unary) and node.op == "-" and not is_index_expr(node):
                check_arithmetic("-", dtype)
        except TypeRuleError as exc:
            found.append((node, str(exc)))
            return
        for child in A.children(node):
            if not isinstance(node, A.Access):  # indices are integers, checked elsewhere
                visit(child, dtype)

    def visit_condition(node: A.Expr, dtype: str) -> None:
        if isinstance(node, A.Binary) and node.op in ("&", "|"):
            visit_condition(node.lhs, dtype)
            visit_condition(node.rhs, dtype)
        elif isinstance(node, A.Unary) and node.op == "!":
            visit_condition(node.operand, dtype)
        elif isinstance(node, A.Binary) and node.op in A.COMPARISONS:
            operands = node if is_index_expr(node.lhs) and is_index_expr(node.rhs) else None
            if operands is None:
                inner = comparison_dtype(node, dtype, tensors)
                visit(node.lhs, inner)
                visit(node.rhs, inner)
        else:
            visit(node, dtype)

    visit(e, context)
    return found


COMPARISONS_AND_LOGIC = A.COMPARISONS | A.LOGICAL
