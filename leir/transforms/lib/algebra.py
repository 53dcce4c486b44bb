"""What the algebraic transformations share: an equation's value as a SymPy
expression and back, facts about signs, and the checks that make a SymPy
rewrite safe to offer. Not a transformation itself (it is not in ``ALL``);
``factorization``, ``cancellation``, ``logsimp``... each choose one SymPy
rewrite and leave the rest to :func:`candidates`, :func:`check` and
:func:`rewrite` here.

**The value.** A plain equation's value is its right-hand side; a
reduction's (``C += e``, ``M = max(M, e)``) is the combined operand ``e``,
so that the reduction keeps its shape and its implied initial value.

**To SymPy.** Tensor accesses become real symbols named by their canonical
text (``X_{i,j}``), loop variables integer symbols; ``exp log sqrt rsqrt abs
erf tanh max min pow`` and ``**`` map to SymPy's functions. Everything whose
meaning SymPy would get wrong or that no strategy rewrites is an opaque atom
named by its text: casts, ``if_then_else``, comparisons, ``sigmoid``,
``floor``, ``ceil``, ``//`` and ``%``. Integer-valued and small dyadic
literals (``2.0``, ``0.5``) become exact rationals; any other literal
(``0.7071067811865476``, ``1e-05``) an opaque positive constant, so that no
rewrite ever rounds it.

**Signs.** A tensor every write of which is provably positive (``Z += exp(...)``)
or nonnegative (a sum of squares) gets that assumption in SymPy; nothing is
assumed of inputs. SymPy's own log and power rules consult these
assumptions, and so do the safety checks.

**Back to LEIR.** Any subexpression SymPy left as it was is printed exactly
as the user wrote it (``1e-05`` stays ``1e-05``, ``rsqrt(...)`` stays); new
parts are printed canonically: ``x*x`` for small powers, ``rsqrt`` for
``**(-1/2)``, ``a/(b*c)``, literals with a decimal point (``2.0``), because
literals take the equation's float dtype.

**When a rewrite is offered.** The equation computes in floating point, its
value is small enough for SymPy to be quick (``MAX_NODES``), SymPy's result
differs from the value and prints differently, and it is numerically safe:
it divides only by what the value already divided by (or by what is
provably nonzero), takes roots only of what it already took roots of (or of
what is provably nonnegative), takes logarithms only of what it already took
them of (or of what is provably positive), and reads the same tensors (a
rewrite that drops the only read of a tensor would change the program's
inputs or outputs). Overflow and underflow are not analysed: a rewrite can
make an intermediate overflow where the original did not (``(a*b)`` inside
``log(a*b)``); the one known trap, splitting ``exp(x - m)``, is refused by
``expand_powsimp``. Last, the printed result is read back into SymPy and
must equal the value at sample points: a check on the printing itself.

Outcomes are cached per value (and the sign facts it uses), so listing the
steps again is cheap: SymPy runs once per distinct value.
"""

from __future__ import annotations

import sys
import functools
import random
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Callable, NamedTuple

from leir import ast as A
from leir import value_types as VT
from leir.printer import print_expr
from leir.semantics import Analysis, EquationInfo
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, NotApplicable, Step, str_arg
from leir.transforms.rewrite import map_expr, replace_at

#: Largest value (syntax tree nodes) handed to SymPy: factoring and
#: expanding grow quickly, and listing steps must stay within milliseconds.
MAX_NODES = 64
#: Largest result (syntax tree nodes) offered: an expansion that multiplies
#: the text is not a step a person wants.
MAX_RESULT_NODES = 192
#: Dtypes an algebraic rewrite may change: in integers ``/`` truncates and
#: overflow wraps, so real-number identities do not hold; 8-bit floats round
#: too coarsely for a rewritten order of operations to stay within tolerance.
FLOAT_DTYPES = frozenset({"f16", "bf16", "f32", "f64"})
#: Powers up to this are printed as products (``x*x``), as people write them.
MAX_PRODUCT_POWER = 4
#: Sample points at which a printed result must equal the value.
EQUALITY_POINTS = 3

POSITIVE, NONNEGATIVE = "positive", "nonnegative"

# ---------------------------------------------------------------- refusals


class NotFloat(NotApplicable):
    """The equation does not compute in f16, bf16, f32 or f64: in integers
    and booleans real-number identities do not hold, and 8-bit floats round
    too coarsely."""


class TooLarge(NotApplicable):
    """The value (or SymPy's result) has more nodes than ``MAX_NODES``
    (``MAX_RESULT_NODES``)."""


class Inexpressible(NotApplicable):
    """The value holds something SymPy cannot stand for exactly (``inf``),
    or SymPy's result has no LEIR spelling."""


class NoChange(NotApplicable):
    """SymPy's rewrite leaves the value (or its printed text) as it is, or
    does not apply to it."""


class Unsafe(NotApplicable):
    """The rewrite would divide by, take a root of, or take the logarithm of
    something the value did not, and that is not provably safe."""


class ChangesReads(NotApplicable):
    """The rewrite would stop reading a tensor (``X - X`` cancels), which
    changes the program's inputs or outputs."""


class Refusals(NamedTuple):
    """The typed errors of one transformation, one per shared precondition."""

    not_float: type[NotApplicable]
    too_large: type[NotApplicable]
    inexpressible: type[NotApplicable]
    no_change: type[NotApplicable]
    unsafe: type[NotApplicable]
    changes_reads: type[NotApplicable]


_SHARED = {"not-float": NotFloat, "too-large": TooLarge, "inexpressible": Inexpressible,
           "no-change": NoChange, "unsafe": Unsafe, "changes-reads": ChangesReads}


def refusals(transform_id: str, module: str) -> Refusals:
    """Subclasses of the shared refusals whose codes carry the
    transformation's id (``factorization-no-change``)."""
    classes = [type(base.__name__, (base,), {"code": f"{transform_id}-{kind}", "__module__": module, "__doc__": base.__doc__})
               for kind, base in _SHARED.items()]
    return Refusals(*classes)


class Refuse(Exception):
    """Raised by a strategy's SymPy rewrite for a precondition of its own;
    ``kind`` names the refusal class (``Spec.errors``)."""

    def __init__(self, kind: str, short: str, detail: str | None = None):
        super().__init__(short)
        self.kind, self.short, self.detail = kind, short, detail or short


# ----------------------------------------------------------------- signs


def _meet(a: str | None, b: str | None) -> str | None:
    order = {None: 0, NONNEGATIVE: 1, POSITIVE: 2}
    return a if order[a] <= order[b] else b


def _join(a: str | None, b: str | None) -> str | None:
    return b if _meet(a, b) == a else a


def _sum_sign(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return None
    return POSITIVE if POSITIVE in (a, b) else NONNEGATIVE


def expr_sign(e: A.Expr, signs: dict[str, str]) -> str | None:
    """POSITIVE or NONNEGATIVE when the value of ``e`` provably is (reals;
    rounding to zero aside), else None."""
    if isinstance(e, A.Num):
        return POSITIVE if e.value > 0 else NONNEGATIVE if e.value == 0 else None
    if isinstance(e, A.Access):
        return signs.get(e.tensor)
    if isinstance(e, A.Binary):
        a, b = expr_sign(e.lhs, signs), expr_sign(e.rhs, signs)
        if e.op == "+":
            return _sum_sign(a, b)
        if e.op == "*":
            if e.lhs == e.rhs:
                return a if a == POSITIVE else NONNEGATIVE
            return _meet(a, b)
        if e.op == "/":
            return a if b == POSITIVE else None
        if e.op == "**":
            return POSITIVE if a == POSITIVE else None
        return None
    if isinstance(e, A.Call):
        args = [expr_sign(x, signs) for x in e.args]
        if e.func in ("exp", "sigmoid"):
            return POSITIVE
        if e.func == "abs":
            return NONNEGATIVE
        if e.func in ("sqrt", "erf", "tanh"):
            return args[0]
        if e.func == "rsqrt":
            return POSITIVE if args[0] is not None else None
        if VT.is_cast(e):
            # A cast to an integer rounds a positive value down to zero.
            return args[0] if VT.is_float_dtype(e.func) else _meet(args[0], NONNEGATIVE)
        if e.func == "max":
            return _join(args[0], args[1])
        if e.func == "min":
            return _meet(args[0], args[1])
        if e.func == "pow":
            return POSITIVE if args[0] == POSITIVE else None
        if e.func == "if_then_else":
            return _meet(args[1], args[2])
    return None


def signs_of(ctx: Context) -> dict[str, str]:
    """``tensor_signs`` of the context's program, once per program."""
    return ctx.memo("tensor_signs", lambda: tensor_signs(ctx.analysis))


def tensor_signs(analysis: Analysis) -> dict[str, str]:
    """Tensors every value of which is provably positive or nonnegative.

    Inputs are unknown. A written tensor gets the weakest sign over its
    writes, each judged with the signs known so far, repeated until nothing
    changes: starting from "unknown" and only ever learning facts that hold
    given facts that hold, a tensor that depends on itself stays unknown."""
    signs: dict[str, str] = {}
    while True:
        found: dict[str, str | None] = {}
        for info in analysis.equations:
            name = info.equation.lhs.tensor
            sign = _write_sign(info, signs)
            found[name] = sign if name not in found else _meet(found[name], sign)
        new = {name: s for name, s in found.items() if s is not None}
        if new == signs:
            return signs
        signs = new


def _write_sign(info: EquationInfo, signs: dict[str, str]) -> str | None:
    eq = info.equation
    if info.combiner is None:
        return expr_sign(eq.rhs, signs)
    operand = expr_sign(info.operand, signs)
    if info.kind == "update":
        old = signs.get(eq.lhs.tensor)
        if info.combiner == "sum":
            return _sum_sign(old, operand)
        if info.combiner == "max":
            return _join(old, operand)
        return _meet(old, operand)
    # A first write folds at least one operand into the implied initial
    # value (0, 1, -inf, +inf) unless a guard can skip every iteration.
    if eq.predicate is None:
        return operand
    if info.combiner == "sum":
        return NONNEGATIVE if operand is not None else None
    return None if info.combiner == "max" else operand


# ------------------------------------------------------------ LEIR -> SymPy


def sympy_module():
    """SymPy, imported on first use (it takes a third of a second)."""
    import sympy

    return sympy


def _count(e: A.Expr) -> int:
    return sum(1 for _ in A.walk(e))


def _name(e: A.Expr) -> str:
    """The canonical text of an atom (an access without superscripts)."""
    if isinstance(e, A.Access):
        e = replace(e, dtype=None, scope=None)
    return print_expr(e)


def _strip_spans(e: A.Expr) -> A.Expr:
    return map_expr(e, lambda n: replace(n, span=None))


class InexpressibleValue(Exception):
    pass


_FUNCTIONS = ("exp", "log", "sqrt", "rsqrt", "abs", "erf", "tanh", "max", "min", "pow")


@dataclass
class Env:
    """An equation's value in SymPy, with what is needed to print a
    rewrite of it back and to judge it."""

    value: object  # sympy.Expr
    #: The loop variables around the equation, outermost first.
    loop_vars: tuple[str, ...]
    #: Symbol -> the LEIR atom it stands for (accesses, opaque parts, literals).
    atoms: dict = field(default_factory=dict)
    #: SymPy value of every subexpression of the original -> that subexpression.
    originals: dict = field(default_factory=dict)
    #: Tensors the value reads.
    reads: frozenset[str] = frozenset()

    def text(self, x) -> str:
        """``x`` as LEIR text, for messages and titles."""
        try:
            return print_expr(to_leir(x, self))
        except InexpressibleValue:
            return str(x)

    def invariant(self, x) -> bool:
        """Whether ``x`` does not depend on the innermost loop variable."""
        if not self.loop_vars:
            return True
        inner = self.loop_vars[-1]
        for s in x.free_symbols:
            atom = self.atoms.get(s, A.Var(s.name))  # a symbol that is no atom is a loop variable
            if any(isinstance(n, A.Var) and n.name == inner for n in A.walk(atom)):
                return False
        return True


def _literal(sp, env: Env, num: A.Num):
    value = num.value
    if isinstance(value, int):
        return sp.Integer(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise InexpressibleValue(f"the literal {num.text}")
    if value < 0:
        return -_literal(sp, env, A.Num(-value, num.text.lstrip("-")))
    exact = Fraction(value)
    if exact.denominator <= 1024 and exact.numerator <= 2**24:  # 2.0, 96.0, 0.5, 0.125: exact
        return sp.Rational(exact.numerator, exact.denominator)
    # Any other literal stays a constant SymPy never rounds. Named by its
    # text, it sorts before tensor names and so prints as a coefficient.
    symbol = sp.Symbol(num.text, positive=True)
    env.atoms[symbol] = num
    return symbol


def _atom(sp, env: Env, e: A.Expr, signs: dict[str, str]):
    assumptions = {"integer": True} if VT.is_index_expr(e) else {"real": True}
    sign = expr_sign(e, signs)
    if sign is not None:
        assumptions[sign] = True
    symbol = sp.Symbol(_name(e), **assumptions)
    env.atoms.setdefault(symbol, e)
    return symbol


def to_sympy(e: A.Expr, env: Env, signs: dict[str, str]):
    """The SymPy value of ``e``; every subexpression is remembered in
    ``env.originals`` so that parts SymPy does not change print as written."""
    sp = sympy_module()
    if isinstance(e, A.Num):
        out = _literal(sp, env, e)
    elif isinstance(e, A.Var):
        out = sp.Symbol(e.name, integer=True)
    elif isinstance(e, A.Access):
        out = _atom(sp, env, e, signs)
    elif isinstance(e, A.Unary) and e.op == "-":
        out = -to_sympy(e.operand, env, signs)
    elif isinstance(e, A.Binary) and e.op in ("+", "-", "*", "/", "**"):
        a, b = to_sympy(e.lhs, env, signs), to_sympy(e.rhs, env, signs)
        out = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
               "/": lambda: a / b, "**": lambda: sp.Pow(a, b)}[e.op]()
    elif isinstance(e, A.Call) and e.func in _FUNCTIONS:
        args = [to_sympy(a, env, signs) for a in e.args]
        out = {"exp": lambda: sp.exp(args[0]), "log": lambda: sp.log(args[0]), "sqrt": lambda: sp.sqrt(args[0]),
               "rsqrt": lambda: sp.Pow(args[0], sp.Rational(-1, 2)), "abs": lambda: sp.Abs(args[0]),
               "erf": lambda: sp.erf(args[0]), "tanh": lambda: sp.tanh(args[0]), "max": lambda: sp.Max(*args),
               "min": lambda: sp.Min(*args), "pow": lambda: sp.Pow(args[0], args[1])}[e.func]()
    else:
        out = _atom(sp, env, e, signs)
    if out.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
        raise InexpressibleValue(print_expr(e))
    env.originals.setdefault(out, e)
    return out


@functools.lru_cache(maxsize=1024)
def environment(value: A.Expr, signs: tuple[tuple[str, str], ...], loop_vars: tuple[str, ...]) -> Env:
    """The value in SymPy (cached: every strategy converts the same values)."""
    env = Env(None, loop_vars)
    env.value = to_sympy(value, env, dict(signs))
    env.reads = frozenset(n.tensor for n in A.walk(value) if isinstance(n, A.Access))
    return env


# ------------------------------------------------------------ SymPy -> LEIR


def _float_literal(sp, env: Env, r) -> A.Expr | None:
    """A nonnegative rational as one literal: as written in the original if
    it was, ``2.0`` for integers, ``0.25`` for small dyadic fractions; else
    None."""
    known = env.originals.get(r)
    if isinstance(known, A.Num):
        return _strip_spans(known)
    if r.is_Integer:
        return A.Num(float(int(r)), f"{int(r)}.0")
    q = int(r.q)
    if q & (q - 1) == 0 and q <= 16:
        return A.Num(float(r), repr(float(r)))
    return None


def _rational(sp, env: Env, r) -> A.Expr:
    literal = _float_literal(sp, env, r)
    if literal is not None:
        return literal
    return A.Binary("/", _float_literal(sp, env, sp.Integer(r.p)), _float_literal(sp, env, sp.Integer(r.q)))


def _chain(op: str, nodes: list[A.Expr]) -> A.Expr:
    out = nodes[0]
    for n in nodes[1:]:
        out = A.Binary(op, out, n)
    return out


def _negative(sp, x) -> bool:
    return x.as_coeff_Mul()[0].is_negative is True


def to_leir(x, env: Env) -> A.Expr:
    """A LEIR expression for the SymPy expression ``x``."""
    sp = sympy_module()
    known = env.originals.get(x)
    if known is not None:
        return _strip_spans(known)
    atom = env.atoms.get(x)
    if atom is not None:
        return _strip_spans(atom)
    if x.is_Rational:
        if x.is_negative:
            return A.Unary("-", _rational(sp, env, -x))
        return _rational(sp, env, x)
    if x.is_Symbol:  # a loop variable, or an atom SymPy rebuilt
        if x.is_integer and x.name.isidentifier():
            return A.Var(x.name)
        raise InexpressibleValue(str(x))
    if x.is_Add:
        terms = list(x.as_ordered_terms())
        first = next((t for t in terms if not _negative(sp, t)), terms[0])
        terms.remove(first)
        out = to_leir(first, env)
        for t in terms:
            out = A.Binary("-", out, to_leir(-t, env)) if _negative(sp, t) else A.Binary("+", out, to_leir(t, env))
        return out
    if x.is_Mul:
        return _product(sp, x, env)
    if x.is_Pow:
        return _power(sp, x, env)
    functions = {sp.exp: "exp", sp.log: "log", sp.erf: "erf", sp.tanh: "tanh", sp.Abs: "abs"}
    if x.func in functions:
        return A.Call(functions[x.func], (to_leir(x.args[0], env),))
    if x.func in (sp.Max, sp.Min):
        args = sorted(x.args, key=lambda a: bool(a.is_number))  # max(x, 0.0), as people write it
        return _chain_call("max" if x.func == sp.Max else "min", [to_leir(a, env) for a in args])
    raise InexpressibleValue(str(x))


def _chain_call(func: str, nodes: list[A.Expr]) -> A.Expr:
    out = nodes[0]
    for n in nodes[1:]:
        out = A.Call(func, (out, n))
    return out


def _product(sp, x, env: Env) -> A.Expr:
    coeff, factors = x.as_coeff_mul()
    negative = coeff < 0
    coeff = abs(coeff)
    numerator, denominator = [], []
    for f in factors:
        if f.is_Pow and f.exp.is_Integer and f.exp < 0:
            denominator.append(to_leir(sp.Pow(f.base, -f.exp), env))
        else:
            numerator.append(to_leir(f, env))
    if coeff != 1:
        literal = _float_literal(sp, env, coeff)
        if literal is not None:
            numerator.insert(0, literal)
        else:
            if coeff.p != 1:
                numerator.insert(0, _float_literal(sp, env, sp.Integer(coeff.p)))
            denominator.insert(0, _float_literal(sp, env, sp.Integer(coeff.q)))
    if not numerator:
        numerator = [A.Num(1.0, "1.0")]
    if negative:
        numerator[0] = A.Unary("-", numerator[0])
    out = _chain("*", numerator)
    return A.Binary("/", out, _chain("*", denominator)) if denominator else out


def _power(sp, x, env: Env) -> A.Expr:
    base, exp = x.base, x.exp
    if base == sp.E:
        return A.Call("exp", (to_leir(exp, env),))
    b = to_leir(base, env)
    if exp.is_Integer:
        n = int(exp)
        if n < 0:
            return A.Binary("/", A.Num(1.0, "1.0"), _power(sp, sp.Pow(base, -n, evaluate=False), env))
        if n <= MAX_PRODUCT_POWER:
            return _chain("*", [b] * n)
        return A.Binary("**", b, A.Num(float(n), f"{n}.0"))
    if exp.is_Rational and exp.q == 2:
        root = A.Call("sqrt" if exp > 0 else "rsqrt", (b,))
        rest = (abs(int(exp.p)) - 1) // 2
        if rest == 0:
            return root
        whole = _power(sp, sp.Pow(base, rest, evaluate=False), env)
        return A.Binary("*", whole, root) if exp > 0 else A.Binary("/", root, whole)
    if exp.is_Rational:
        if exp < 0:
            return A.Binary("/", A.Num(1.0, "1.0"), _power(sp, sp.Pow(base, -exp, evaluate=False), env))
        return A.Binary("**", b, _rational(sp, env, exp))
    return A.Binary("**", b, to_leir(exp, env))


# ------------------------------------------------------- rewrite helpers


def polynomial(op: Callable, *, deep: bool = True) -> Callable:
    """``op`` (factor, expand, cancel...) applied to the value with every
    function application and root replaced by a symbol first, so that it
    sees only sums, products and small integer powers (a high power is not
    multiplied out: ``(a + b)**12`` has 13 terms): ``factor`` does not split
    ``exp(x - m)`` into ``exp(x)*exp(-m)``, and ``rsqrt(v)`` is a factor,
    not a fraction to put over a common denominator (which would add a
    ``sqrt``). With ``deep``, ``op`` is also applied inside those
    arguments."""

    def run(value):
        sp = sympy_module()
        hidden: dict = {}  # node (with no symbol of ours inside) -> its symbol
        shown: dict = {}  # the inverse

        def hide(node):
            node = node.xreplace(shown)
            symbol = hidden.get(node)
            if symbol is None:
                assumptions = {"positive": True} if node.is_positive else {"nonnegative": True} if node.is_nonnegative else {}
                symbol = sp.Dummy(**({"real": True} | assumptions)) if node.is_real else sp.Dummy()
                hidden[node], shown[symbol] = symbol, node
            return symbol

        def visit(x):
            if x.is_Atom:
                return x
            if x.is_Add or x.is_Mul:
                return x.func(*[visit(a) for a in x.args])
            if x.is_Pow and x.exp.is_Integer and abs(x.exp) <= MAX_PRODUCT_POWER:
                return sp.Pow(visit(x.base), x.exp)
            inner = (lambda a: op(visit(a))) if deep else visit
            return hide(x.func(*[inner(a) for a in x.args]))

        return op(visit(value)).xreplace(shown)

    return run


def fewer_operations(op: Callable) -> Callable:
    """``op``, kept only where it saves operations: SymPy's ``factor``
    returns a polynomial it cannot factor multiplied out."""

    def run(x):
        sp = sympy_module()
        result = op(x)
        return result if sp.count_ops(result) < sp.count_ops(x) else x

    return run


def has_fraction(value) -> bool:
    """Whether the value divides by something (``rsqrt`` is a function,
    not a fraction)."""
    sp = sympy_module()
    return any(p.exp.is_negative and p.exp.is_integer for p in value.atoms(sp.Pow))


def require_fraction(env: Env, verb: str) -> None:
    """Refuse with kind ``no-fraction`` unless the value divides by something."""
    if not has_fraction(env.value):
        raise Refuse("no-fraction", "the value has no fraction",
                     f"{verb} works on fractions, and {env.text(env.value)} divides by nothing")


def positive_logs_only(env: Env, op: Callable, requirement: str):
    """``op(value, force=False)`` (SymPy's ``logcombine``, ``expand_log``),
    refusing with kind ``not-positive`` where only ``force=True``, which
    ignores the signs, would change the value."""
    result = op(env.value, force=False)
    if result == env.value and op(env.value, force=True) != env.value:
        sp = sympy_module()
        logs = ", ".join(sorted(env.text(lg) for lg in env.value.atoms(sp.log) if not lg.args[0].is_positive))
        raise Refuse("not-positive", "the logarithms' arguments are not provably positive",
                     f"{requirement}, and {logs} may not be")
    return result


# ----------------------------------------------------------------- safety


def _must_be_nonzero(sp, x) -> list:
    """Bases ``x`` divides by (negative or symbolic exponents)."""
    return [p.base for p in x.atoms(sp.Pow) if p.exp.is_negative or not p.exp.is_number]


def _irreducible(sp, x) -> list:
    try:
        return [f for f, _ in sp.factor_list(x)[1]] or [x]
    except Exception:  # SymPy's polynomial layer rejects some generators
        return [x]


def unsafe(env: Env, result) -> str | None:
    """Why ``result`` is not numerically safe where the value was, or None."""
    sp = sympy_module()
    before = env.value
    divided = {f for b in _must_be_nonzero(sp, before) for f in _irreducible(sp, b)}
    for base in _must_be_nonzero(sp, result):
        for f in _irreducible(sp, base):
            if f.is_zero is False or f in divided or -f in divided:
                continue
            return f"it divides by {env.text(f)}, which can be zero where the original does not divide by it"
    rooted = {p.base for p in before.atoms(sp.Pow) if not p.exp.is_integer}
    for p in result.atoms(sp.Pow):
        if p.exp.is_integer or p.base in rooted:
            continue
        if p.exp.is_number and p.base.is_nonnegative or p.base.is_positive:
            continue
        return f"it takes {env.text(p)}, and {env.text(p.base)} can be negative"
    logs = before.atoms(sp.log)
    for lg in result.atoms(sp.log) - logs:
        if lg.args[0].is_positive is not True:
            return f"it takes {env.text(lg)}, and {env.text(lg.args[0])} is not provably positive"
    return None


def agrees(env: Env, new: A.Expr, signs: dict[str, str]) -> bool:
    """Whether the printed result ``new``, read back into SymPy, equals the
    value at ``EQUALITY_POINTS`` sample points (exact rationals; functions
    evaluated to 30 digits): a check on SymPy's rewrite and on the printing
    of it. Every other point gives unsigned values random signs, the others
    are positive; points outside the value's real domain are skipped (up to
    ``8 * EQUALITY_POINTS`` are tried), and a value no point is inside of
    counts as a disagreement."""
    sp = sympy_module()
    back = to_sympy(new, Env(None, env.loop_vars), signs)
    symbols = sorted(env.value.free_symbols | back.free_symbols, key=str)
    rng = random.Random(0)
    usable = 0
    for attempt in range(8 * EQUALITY_POINTS):
        point = {}
        for s in symbols:
            if s.is_integer:
                point[s] = sp.Integer(rng.randint(0, 6))
            else:
                magnitude = sp.Rational(rng.randint(1, 60), rng.randint(1, 7))
                signed = attempt % 2 == 1 and not s.is_nonnegative and rng.random() < 0.5
                point[s] = -magnitude if signed else magnitude
        try:
            expected = sp.N(env.value.xreplace(point), 30)
            got = sp.N(back.xreplace(point), 30)
        except (TypeError, ValueError):  # max/min of values that are not real
            continue
        if not (expected.is_real and expected.is_finite):
            continue
        if not (got.is_real and got.is_finite) or abs(expected - got) > sp.Float("1e-20") * (1 + abs(expected)):
            return False
        usable += 1
        if usable == EQUALITY_POINTS:
            break
    return usable > 0


# --------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Spec:
    """One algebraic transformation: its id, a verb for titles, the SymPy
    rewrite and its typed errors (the shared ones, plus its own by kind).

    ``sympy_rewrite(env)`` returns the rewritten ``env.value``, or a pair
    (rewritten value, a phrase the title names, e.g. the collected factor);
    it raises :class:`Refuse` for a precondition of its own."""

    id: str
    verb: str
    sympy_rewrite: Callable
    errors: Refusals
    own_errors: tuple[tuple[str, type[NotApplicable]], ...] = ()

    def error(self, kind: str) -> type[NotApplicable]:
        own = dict(self.own_errors)
        if kind in own:
            return own[kind]
        return self.errors[list(_SHARED).index(kind)]


@dataclass(frozen=True)
class Outcome:
    result: A.Expr | None = None  # the new value
    note: str | None = None  # what the title names besides the block
    kind: str | None = None  # the refusal, when result is None
    short: str = ""
    detail: str = ""


def value_slot(info: EquationInfo) -> tuple[A.Expr, Callable[[A.Expr], A.Expr]]:
    """The value a rewrite may change and how to put a new one back:
    the right-hand side, or a reduction's combined operand."""
    eq = info.equation
    rhs = eq.rhs
    if info.combiner is None:
        return rhs, lambda v: v

    def is_self(e: A.Expr) -> bool:
        return isinstance(e, A.Access) and e.tensor == eq.lhs.tensor and e.indices == eq.lhs.indices

    if isinstance(rhs, A.Binary):
        if is_self(rhs.lhs):
            return rhs.rhs, lambda v: replace(rhs, rhs=v)
        return rhs.lhs, lambda v: replace(rhs, lhs=v)
    a, b = rhs.args
    if is_self(a):
        return b, lambda v: replace(rhs, args=(a, v))
    return a, lambda v: replace(rhs, args=(v, b))


def _facts(info: EquationInfo, value: A.Expr, signs: dict[str, str]) -> tuple[tuple[str, str], ...]:
    read = {n.tensor for n in A.walk(value) if isinstance(n, A.Access)}
    return tuple(sorted((t, s) for t, s in signs.items() if t in read))


@functools.lru_cache(maxsize=4096)
def outcome(spec: Spec, value: A.Expr, dtype: str, signs: tuple[tuple[str, str], ...],
            loop_vars: tuple[str, ...]) -> Outcome:
    """What ``spec`` does to ``value`` (cached: the same values come back
    on every listing)."""
    if dtype not in FLOAT_DTYPES:
        return Outcome(kind="not-float", short=f"the equation computes in {dtype}",
                       detail=f"algebraic rewrites assume real arithmetic; this equation computes in {dtype}, "
                              f"where division truncates or rounding is too coarse (only f16, bf16, f32 and f64 are rewritten)")
    size = _count(value)
    if size > MAX_NODES:
        return Outcome(kind="too-large", short=f"the value has {size} nodes",
                       detail=f"the value has {size} syntax nodes; SymPy is only asked about values of at most {MAX_NODES}, "
                              f"to keep listing steps fast (split the expression first)")
    try:
        env = environment(value, signs, loop_vars)
    except InexpressibleValue as e:
        return Outcome(kind="inexpressible", short=f"SymPy cannot represent {e}",
                       detail=f"the value holds {e}, which SymPy cannot represent exactly (an infinity or not-a-number)")
    try:
        result = spec.sympy_rewrite(env)
    except Refuse as r:
        return Outcome(kind=r.kind, short=r.short, detail=r.detail)
    except Exception as e:  # SymPy raises many types for inputs outside an algorithm's domain
        return Outcome(kind="no-change", short=f"{spec.id} does not apply",
                       detail=f"{spec.id} does not apply to {print_expr(value)}: SymPy raised {type(e).__name__}: {e}")
    note = None
    if isinstance(result, tuple):
        result, note = result
    if _tree_size(result) > MAX_RESULT_NODES:
        return Outcome(kind="too-large", short="the result is too large",
                       detail=f"{spec.id} gives more than {MAX_RESULT_NODES} syntax nodes, more than is offered")
    if result == env.value:
        return Outcome(kind="no-change", short=f"{spec.id} leaves the value as it is",
                       detail=f"{spec.id} of {print_expr(value)} gives the same expression")
    try:
        new = to_leir(result, env)
    except InexpressibleValue as e:
        return Outcome(kind="inexpressible", short="the result has no LEIR spelling",
                       detail=f"{spec.id} gives {result}, and {e} has no LEIR spelling")
    if print_expr(new) == print_expr(value):
        return Outcome(kind="no-change", short=f"{spec.id} leaves the text as it is",
                       detail=f"{spec.id} of {print_expr(value)} prints the same")
    if _count(new) > MAX_RESULT_NODES:
        return Outcome(kind="too-large", short=f"the result has {_count(new)} nodes",
                       detail=f"{spec.id} gives {_count(new)} syntax nodes, more than the {MAX_RESULT_NODES} offered")
    problem = unsafe(env, result)
    if problem is not None:
        return Outcome(kind="unsafe", short=f"{spec.id} is not numerically safe here",
                       detail=f"{spec.id} gives {print_expr(new)}, but {problem}")
    dropped = env.reads - {n.tensor for n in A.walk(new) if isinstance(n, A.Access)}
    if dropped:
        names = ", ".join(sorted(dropped))
        return Outcome(kind="changes-reads", short=f"{spec.id} stops reading {names}",
                       detail=f"{spec.id} gives {print_expr(new)}, which no longer reads {names}: "
                              f"that changes the program's inputs or outputs")
    if not agrees(env, new, dict(signs)):
        return Outcome(kind="inexpressible", short="the printed result differs from SymPy's",
                       detail=f"{spec.id} gives {result}, but its LEIR spelling {print_expr(new)} computes something "
                              f"else at sample points: a bug in leir's printing, reported rather than offered")
    return Outcome(result=new, note=note)


def _tree_size(x, limit: int = MAX_RESULT_NODES) -> int:
    """The nodes of a SymPy expression, counting stops past ``limit``."""
    sp = sympy_module()
    n = 0
    for _ in sp.preorder_traversal(x):
        n += 1
        if n > limit:
            break
    return n


def _outcome_of(spec: Spec, ctx: Context, info: EquationInfo, signs: dict[str, str]) -> Outcome:
    value, _ = value_slot(info)
    dtype = ctx.analysis.tensors[info.equation.lhs.tensor].dtype
    loop_vars = tuple(loop.var for loop in info.loops)
    return outcome(spec, value, dtype, _facts(info, value, signs), loop_vars)


def _raise(spec: Spec, ctx: Context, info: EquationInfo, out: Outcome) -> None:
    block = ctx.block_names[info.index]
    raise spec.error(out.kind)(f"{block}: {out.short}", f"in {block}: {out.detail}", info.equation.span)


def _title(spec: Spec, block: str, o: Outcome) -> str:
    """``Factor Y: X_{i}*(A_{i} + B_{i})``, ``Collect g_{i} in Y: ...``."""
    text = print_expr(o.result)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{spec.verb} {o.note} in {block}: {text}" if o.note else f"{spec.verb} {block}: {text}"


def candidates(spec: Spec, ctx: Context, at: int | None) -> list[Candidate]:
    """One step per equation at ``at`` (all when None) that ``spec`` changes."""
    out = []
    signs = None
    for info in ctx.equations_at(at):
        if signs is None:
            signs = signs_of(ctx)
        o = _outcome_of(spec, ctx, info, signs)
        if o.result is not None:
            block = ctx.block_names[info.index]
            out.append(Candidate(Step(spec.id, {"block": block}), _title(spec, block, o), info.equation.span))
    return out


def check(spec: Spec, ctx: Context, args: dict) -> None:
    info = ctx.equation_of_block(str_arg(args, "block", spec.id))
    o = _outcome_of(spec, ctx, info, signs_of(ctx))
    if o.result is None:
        _raise(spec, ctx, info, o)


def rewrite(spec: Spec, ctx: Context, args: dict) -> A.Program:
    info = ctx.equation_of_block(str_arg(args, "block", spec.id))
    o = _outcome_of(spec, ctx, info, signs_of(ctx))
    if o.result is None:
        _raise(spec, ctx, info, o)
    _, put_back = value_slot(info)
    equation = replace(info.equation, rhs=put_back(o.result), span=None)
    return replace_at(ctx.program, info.site.path, (equation,))


def entry_points(spec: Spec) -> tuple[Callable, Callable, Callable]:
    """The ``candidates``, ``check`` and ``rewrite`` of a transformation
    module, for ``spec``."""

    def candidates_(ctx: Context, at: int | None) -> list[Candidate]:
        """One step per equation at ``at`` (all when None) that this transformation changes."""
        return candidates(spec, ctx, at)

    def check_(ctx: Context, args: dict) -> None:
        """Raise the typed error of the first precondition ``args`` fails."""
        check(spec, ctx, args)

    def rewrite_(ctx: Context, args: dict) -> A.Program:
        """The program with the equation of ``args["block"]`` rewritten."""
        return rewrite(spec, ctx, args)

    return candidates_, check_, rewrite_


def apply_step(step: str, program, block: str):
    """Apply the step module named ``step`` (its ``__name__``, the module of
    a ``Spec``) to ``block`` and return the new program."""
    return apply_transform(step, program, Step(sys.modules[step].ID, {"block": block}))
