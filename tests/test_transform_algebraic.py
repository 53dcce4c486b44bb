"""The algebraic transformations (Step-TP's SymPy strategies): what each
rewrites, every precondition as a typed error, the LEIR <-> SymPy
conversion, sign facts, and every step offered on the bundled examples
applied and verified numerically."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from leir.bridge.document import load_leir
from leir.printer import print_expr, print_program
from leir.transforms import (apart, cancellation, collect, expand_cancellation, expand_collect, expand_factorization,
                             expand_log, expand_powsimp, factorization, logsimp, powsimp, together)
from leir import transforms
from leir.transforms.lib import algebra
from leir.transforms.base import BadStep, Context, StaleStep, Step
from leir.transforms.testing import check_action, check_not_applicable

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MODULES = (factorization, expand_factorization, cancellation, expand_cancellation, together, apart, powsimp,
           expand_powsimp, logsimp, expand_log, collect, expand_collect)
IDS = tuple(m.ID for m in MODULES)
STEPTP_NAMES = ("factorization", "expand_factorization", "cancellation", "expand_cancellation", "together", "apart",
                "powsimp", "expand_powsimp", "logsimp", "expand_log", "collect", "expand_collect")


def analysis(text: str):
    doc = load_leir(text)
    assert doc.ok, [d.message for d in doc.diagnostics if d.is_error]
    return doc.analysis


def test_registered_under_their_steptp_names():
    assert [m.STEPTP for m in MODULES] == list(STEPTP_NAMES)
    assert all(transforms.get(m.ID) is m for m in MODULES)
    assert algebra not in transforms.ALL


# ------------------------------------------------------------- rewrites


def test_factorization_of_a_reduction_operand_keeps_the_reduction():
    check_action(factorization, """\
L^{8}_{i}
  L^{16}_{j} [
    S_{i} += X_{i,j}*g_{i} + A_{i,j}*g_{i};$0
  ];
""", """\
L^{8}_{i}
  L^{16}_{j} [
    S_{i} += g_{i}*(A_{i,j} + X_{i,j});
  ];
""")


def test_collect_prefers_the_factor_invariant_in_the_inner_loop():
    # X_{i,j} is shared by two terms as well, but g_{i} can be hoisted out of j.
    check_action(collect, """\
L^{8}_{i}
  L^{16}_{j} [
    Y_{i,j} = X_{i,j}*g_{i} + X_{i,j}*A_{i,j}*g_{i} + B_{i,j};$0
  ];
""", """\
L^{8}_{i}
  L^{16}_{j} [
    Y_{i,j} = B_{i,j} + g_{i}*(X_{i,j}*A_{i,j} + X_{i,j});
  ];
""")


def test_subtracting_reduction_rewrites_the_subtracted_operand():
    check_action(expand_factorization, """\
L^{8}_{i}
  L^{16}_{j} [
    S_{i} -= X_{i,j}*(A_{i,j} + 1.0);$0
  ];
""", """\
L^{8}_{i}
  L^{16}_{j} [
    S_{i} -= A_{i,j}*X_{i,j} + X_{i,j};
  ];
""")


def test_max_reduction_rewrites_its_operand():
    check_action(factorization, """\
L^{8}_{i}
  L^{16}_{j} [
    M_{i} = max(M_{i}, X_{i,j}*A_{i,j} + X_{i,j}*B_{i,j});$0
  ];
""", """\
L^{8}_{i}
  L^{16}_{j} [
    M_{i} = max(M_{i}, X_{i,j}*(A_{i,j} + B_{i,j}));
  ];
""")


def test_untouched_parts_keep_their_spelling():
    # 1e-05, rsqrt(...) and the 2 are printed as written (a literal takes the equation's dtype).
    check_action(expand_factorization, """\
L^{8}_{i}
  L^{16}_{j} [
    Y_{i,j} = (X_{i,j} - 2)*rsqrt(V_{i}*V_{i} + 1e-05);$0
  ];
""", """\
L^{8}_{i}
  L^{16}_{j} [
    Y_{i,j} = X_{i,j}*rsqrt(V_{i}*V_{i} + 1e-05) - 2*rsqrt(V_{i}*V_{i} + 1e-05);
  ];
""")


def test_variance_expands_with_exact_fractions():
    # 2/96 is printed as /48.0: a new literal gets a decimal point.
    check_action(expand_factorization, """\
L^{128}_{i}
  L^{96}_{j} [
    mean_{i} += X_{i,j}/96.0;
  ];

L^{128}_{i}
  L^{96}_{j} [
    var_{i} += (X_{i,j} - mean_{i})*(X_{i,j} - mean_{i})/96.0;$0
  ];
""", """\
L^{128}_{i}
  L^{96}_{j} [
    mean_{i} += X_{i,j}/96.0;
  ];

L^{128}_{i}
  L^{96}_{j} [
    var_{i} += X_{i,j}*X_{i,j}/96.0 - X_{i,j}*mean_{i}/48.0 + mean_{i}*mean_{i}/96.0;
  ];
""")


def test_loop_variables_in_values_are_integers():
    check_action(expand_collect, """\
L^{16}_{i} [
  Y_{i} = X_{i}*(i + 1);$0
];
""", """\
L^{16}_{i} [
  Y_{i} = X_{i}*i + X_{i};
];
""")


def test_opaque_parts_are_moved_whole():
    # if_then_else, casts and sigmoid are atoms: distributed over, never rewritten inside.
    check_action(expand_collect, """\
in  H: f16[16]

L^{16}_{i} [
  Y_{i} = sigmoid(X_{i})*(if_then_else(i < 8, X_{i}, 0.0) + f32(H_{i}));$0
];
""", """\
in  H: f16[16]

L^{16}_{i} [
  Y_{i} = f32(H_{i})*sigmoid(X_{i}) + if_then_else(i < 8, X_{i}, 0.0)*sigmoid(X_{i});
];
""")


def test_expand_powsimp_splits_only_the_sums_of_one_sign():
    check_action(expand_powsimp, """\
L^{16}_{i} [
  Y_{i} = exp(X_{i} - A_{i})*exp(B_{i} + X_{i}*2.0);$0
];
""", """\
L^{16}_{i} [
  Y_{i} = exp(B_{i})*exp(X_{i}*2.0)*exp(X_{i} - A_{i});
];
""")


def test_cursor_selects_the_equation_under_it():
    text = "L^{8}_{i} [\n  Y_{i} = X_{i}*A_{i} + X_{i}*B_{i};\n  W_{i} = X_{i}*A_{i} + X_{i}*B_{i};\n];\n"
    a = analysis(text)
    at = text.index("W_{i} =") + 2
    assert [c.step.args for c in factorization.candidates(Context(a), at)] == [{"block": "W"}]
    assert [c.step.args for c in factorization.candidates(Context(a), None)] == [{"block": "Y"}, {"block": "W"}]
    assert factorization.candidates(Context(a), text.index("];")) == []


def test_title_names_the_block_and_the_result():
    a = analysis("L^{8}_{i} [\n  Y_{i} = X_{i}*A_{i} + X_{i}*B_{i};\n];\n")
    (c,) = factorization.candidates(Context(a), None)
    assert c.title == "Factor Y: X_{i}*(A_{i} + B_{i})"
    (c,) = collect.candidates(Context(a), None)
    assert c.title == "Collect X_{i} in Y: X_{i}*(A_{i} + B_{i})"


# -------------------------------------------------------- preconditions

INTEGER = """\
in  X: i32[16]
in  A: i32[16]
out Y: i32[16]

L^{16}_{i} [
  Y_{i} = X_{i}*A_{i} + X_{i}*(A_{i} + 1)/X_{i};$0
];
"""
LARGE = "L^{16}_{i} [\n  Y_{i} = " + " + ".join(f"X_{{i}}*A_{{i}}*{k}.5" for k in range(12)) + ";$0\n];\n"
INFINITE = "L^{16}_{i} [\n  Y_{i} = max(X_{i}*A_{i} + X_{i}*B_{i}, -inf)/(A_{i}*A_{i} + 1.0);$0\n];\n"


@pytest.mark.parametrize("module", MODULES, ids=IDS)
def test_fail_not_float(module):
    e = check_not_applicable(module, INTEGER, module.NotFloat, {"block": "Y"})
    assert e.code == f"{module.ID}-not-float" and "i32" in e.detail and "Y" in e.detail


@pytest.mark.parametrize("module", MODULES, ids=IDS)
def test_fail_too_large(module):
    e = check_not_applicable(module, LARGE, module.TooLarge, {"block": "Y"})
    assert e.code == f"{module.ID}-too-large" and f"at most {algebra.MAX_NODES}" in e.detail


@pytest.mark.parametrize("module", MODULES, ids=IDS)
def test_fail_inexpressible(module):
    e = check_not_applicable(module, INFINITE, module.Inexpressible, {"block": "Y"})
    assert e.code == f"{module.ID}-inexpressible" and "inf" in e.detail


NO_CHANGE = {
    "factorization": "Y_{i} = X_{i} + A_{i}*B_{i}",
    "expand_factorization": "Y_{i} = X_{i}*A_{i} + exp(X_{i} + B_{i})",
    "cancellation": "Y_{i} = X_{i}/(A_{i}*A_{i} + 1.0)",
    "expand_cancellation": "Y_{i} = X_{i}*B_{i}/(A_{i}*A_{i} + 1.0)",
    "together": "Y_{i} = X_{i}/(A_{i}*A_{i} + 1.0)",
    "apart": "Y_{i} = X_{i}/(A_{i}*A_{i} + 1.0)",
    "powsimp": "Y_{i} = exp(X_{i})*A_{i}",
    "expand_powsimp": "Y_{i} = exp(X_{i})*A_{i}",
    "logsimp": "Y_{i} = log(X_{i}*X_{i} + 1.0) + A_{i}",
    "expand_log": "Y_{i} = log(X_{i}*X_{i} + 1.0) + A_{i}",
    "collect": "Y_{i} = X_{i}*A_{i} + B_{i}",
    "expand_collect": "Y_{i} = (X_{i} + A_{i})*(X_{i} + B_{i})",
}


@pytest.mark.parametrize("module", MODULES, ids=IDS)
def test_fail_no_change(module):
    text = f"L^{{16}}_{{i}} [\n  {NO_CHANGE[module.ID]};$0\n];\n"
    e = check_not_applicable(module, text, module.NoChange, {"block": "Y"})
    assert e.code == f"{module.ID}-no-change" and "Y" in e.detail and "X_{i}" in e.detail


@pytest.mark.parametrize("module", [cancellation, factorization], ids=["cancellation", "factorization"])
def test_fail_changes_reads(module):
    # (A*X + A)/(A*B + A) cancels to (X + 1)/(B + 1): A would no longer be read.
    text = "L^{16}_{i} [\n  Y_{i} = (A_{i}*X_{i} + A_{i})/(A_{i}*B_{i} + A_{i});$0\n];\n"
    e = check_not_applicable(module, text, module.ChangesReads, {"block": "Y"})
    assert e.code == f"{module.ID}-changes-reads" and "no longer reads A" in e.detail


@pytest.mark.parametrize("module", MODULES, ids=IDS)
def test_fail_unsafe(module):
    """No shipped rewrite reaches this backstop on its own (SymPy checks the
    assumptions first); a rewrite that divides by a new value shows that it
    refuses, with each transformation's own error class."""
    spec = algebra.Spec(module.ID, "Test", lambda env: env.value / (sorted(env.value.free_symbols, key=str)[0] - 1),
                        module.ERRORS)
    ctx = Context(analysis("L^{16}_{i} [\n  Y_{i} = X_{i}*A_{i};\n];\n"))
    with pytest.raises(module.Unsafe) as e:
        algebra.check(spec, ctx, {"block": "Y"})
    assert e.value.code == f"{module.ID}-unsafe" and "A_{i} - 1.0" in e.value.detail and "can be zero" in e.value.detail


@pytest.mark.parametrize("module", [cancellation, expand_cancellation, together, apart],
                         ids=["cancellation", "expand_cancellation", "together", "apart"])
def test_fail_no_fraction(module):
    e = check_not_applicable(module, "L^{16}_{i} [\n  Y_{i} = X_{i}*(A_{i} + B_{i})*rsqrt(B_{i}*B_{i} + 1.0);$0\n];\n",
                             module.NoFraction, {"block": "Y"})
    assert e.code == f"{module.ID}-no-fraction" and "X_{i}" in e.detail


def test_apart_fail_not_univariate():
    e = check_not_applicable(apart, "L^{16}_{i} [\n  Y_{i} = X_{i}/(X_{i}*A_{i} + 1.0);$0\n];\n",
                             apart.NotUnivariate, {"block": "Y"})
    assert "A_{i}, X_{i}" in e.detail


def test_expand_powsimp_fail_unstable_exp():
    e = check_not_applicable(expand_powsimp, (EXAMPLES / "softmax.leir").read_text().replace(
        "Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};", "Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};$0"),
        expand_powsimp.UnstableExp, {"block": "Y"})
    assert "exp(X_{i,j} - M_{i})" in e.detail and "overflow" in e.detail


@pytest.mark.parametrize("module", [logsimp, expand_log], ids=["logsimp", "expand_log"])
def test_fail_not_positive(module):
    value = "log(A_{i}) + log(B_{i})" if module is logsimp else "log(A_{i}*B_{i})"
    e = check_not_applicable(module, f"L^{{16}}_{{i}} [\n  Y_{{i}} = {value};$0\n];\n", module.NotPositive, {"block": "Y"})
    assert e.code == f"{module.ID}-not-positive" and "A_{i}" in e.detail


@pytest.mark.parametrize("module", MODULES, ids=IDS)
def test_stale_and_malformed_steps(module):
    a = analysis("L^{8}_{i} [\n  Y_{i} = X_{i}*A_{i} + X_{i}*B_{i};\n];\n")
    with pytest.raises(StaleStep):
        transforms.apply(a, Step(module.ID, {"block": "Q"}))
    with pytest.raises(BadStep):
        transforms.apply(a, Step(module.ID, {"block": 3}))


# ------------------------------------------------- conversion and facts


def _examples():
    return sorted(EXAMPLES.glob("*.leir"))


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.stem)
def test_an_unchanged_value_prints_as_written(path):
    a = analysis(path.read_text())
    signs = algebra.tensor_signs(a)
    for info in a.equations:
        value, _ = algebra.value_slot(info)
        env = algebra.environment(value, algebra._facts(info, value, signs), tuple(l.var for l in info.loops))
        assert print_expr(algebra.to_leir(env.value, env)) == print_expr(value)


def test_signs_come_from_what_is_written():
    signs = algebra.tensor_signs(analysis((EXAMPLES / "softmax.leir").read_text()))
    assert signs == {"Z": "positive", "Y": "positive"}  # M is a max of inputs: unknown
    signs = algebra.tensor_signs(analysis((EXAMPLES / "layernorm.leir").read_text()))
    assert signs == {"var": "nonnegative"}
    guarded = analysis("L^{4}_{i}\n  L^{8}_{j} [\n    Z_{i} += exp(X_{i,j}) where j < i;\n  ];\n")
    assert algebra.tensor_signs(guarded) == {"Z": "nonnegative"}  # row 0 sums nothing


def test_a_tensor_that_depends_on_itself_stays_unknown():
    a = analysis("L^{4}_{i} [\n  T_{i} = exp(X_{i});\n];\nL^{4}_{i} [\n  T_{i} = T_{i}*A_{i};\n];\n")
    assert algebra.tensor_signs(a) == {}


# --------------------------------------------------- offered <=> check


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.stem)
def test_offered_exactly_when_check_passes(path):
    ctx = Context(analysis(path.read_text()))
    for module in MODULES:
        offered = {c.step.args["block"] for c in module.candidates(ctx, None)}
        for block in ctx.block_names:
            try:
                module.check(ctx, {"block": block})
                passed = True
            except transforms.NotApplicable:
                passed = False
            assert passed == (block in offered), (module.ID, block)


CANDIDATES_EXPECTED = {
    "gelu": {"expand_factorization", "expand_collect"},
    "layernorm": {"expand_factorization", "expand_collect"},
    "batchnorm": {"expand_factorization", "expand_collect"},
    "conv_bn_relu": {"expand_factorization", "expand_collect"},
    "gemm_gelu_residual": {"expand_factorization", "expand_collect"},
}


def test_examples_with_algebraic_steps():
    for stem, ids in CANDIDATES_EXPECTED.items():
        found = {c.step.id for c in transforms.candidates(analysis((EXAMPLES / f"{stem}.leir").read_text()), only=IDS)}
        assert found == ids, stem
    # softmax and log_softmax have none: the only rewrite SymPy finds undoes the max-subtraction.
    for stem in ("softmax", "log_softmax"):
        assert transforms.candidates(analysis((EXAMPLES / f"{stem}.leir").read_text()), only=IDS) == []


# ------------------------------------------------- a law on random values

_ATOMS = ("X_{i,j}", "A_{i,j}", "g_{i}", "Z_{i}", "P_{i,j}", "2.0", "0.5", "1e-05", "3", "j", "0.7071067811865476")
_POSITIVE_ROWS = """\
L^{4}_{i}
  L^{6}_{j} [
    Z_{i} += exp(B_{i,j});
    P_{i,j} = exp(B_{i,j}*0.5) + 0.1;
  ];

"""


def _random_value(rng: random.Random, depth: int) -> str:
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(_ATOMS)
    a, b = _random_value(rng, depth - 1), _random_value(rng, depth - 1)
    shape = rng.choice(["+", "-", "*", "*", "/", "f", "f"])
    if shape in "+-*":
        return f"({a}) {shape} ({b})" if shape != "*" else f"({a})*({b})"
    if shape == "/":
        return f"({a})/({b}*{b} + 1.0)" if rng.random() < 0.5 else f"({a})/Z_{{i}}"
    f = rng.choice(["exp", "log", "sqrt", "rsqrt", "abs", "erf", "tanh", "max", "min", "sigmoid"])
    if f in ("log", "sqrt", "rsqrt"):
        return f"{f}(({a})*({a}) + 1.0)" if rng.random() < 0.5 else f"{f}(Z_{{i}}*P_{{i,j}})"
    if f in ("max", "min"):
        return f"{f}({a}, {b})"
    return f"exp(({a})*0.1)" if f == "exp" else f"{f}({a})"


@pytest.mark.slow
def test_every_step_on_random_values_computes_the_same():
    """Every step offered on random values built from sums, products,
    fractions and functions of inputs, positive row sums and literals gives
    what the value gave, by the NumPy evaluator within Step-TP's tolerances."""
    from leir.evaluate import evaluate
    from leir.inputs import random_inputs
    from leir.bridge.run import compare

    rng = random.Random(7)
    steps: dict[str, int] = {}
    for _ in range(150):
        text = _POSITIVE_ROWS + f"L^{{4}}_{{i}}\n  L^{{6}}_{{j}} [\n    Y_{{i,j}} = {_random_value(rng, 3)};\n  ];\n"
        before = analysis(text)
        inputs = random_inputs(before, 0)
        expected = evaluate(before, inputs)["Y"]
        for module in MODULES:  # the printed result always reads back as SymPy's
            try:
                module.check(Context(before), {"block": "Y"})
            except transforms.NotApplicable as e:
                assert "bug in leir" not in e.detail, e.detail
        for candidate in transforms.candidates(before, only=IDS):
            after = analysis(print_program(transforms.apply(before, candidate.step)))
            comparison = compare(evaluate(after, inputs)["Y"], expected, "f32")
            assert comparison.ok, f"{candidate.title} on {print_expr(before.equations[-1].equation.rhs)}: {comparison.describe()}"
            steps[candidate.step.id] = steps.get(candidate.step.id, 0) + 1
    assert sum(steps.values()) > 60 and len(steps) >= 9, steps  # the generator reaches most strategies


# ------------------------------------------------------- every step runs


#: Second steps verified per transformation and example, drawn with a fixed seed.
SECOND_STEPS = 6


@pytest.mark.slow
@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.stem)
def test_every_offered_step_on_the_examples_verifies(path):
    """Every step offered on an example, and a deterministic sample of the
    steps offered after it (collect after expand...), computes what the
    example computes."""
    before = analysis(path.read_text())
    second: dict[str, list] = {}
    for candidate in transforms.candidates(before, only=IDS):
        after = analysis(print_program(transforms.apply(before, candidate.step)))
        result = transforms.verify(before, after)
        assert result.ok, f"{candidate.title}: {result.summary()}"
        for then in transforms.candidates(after, only=IDS):
            second.setdefault(then.step.id, []).append((candidate, after, then))
    rng = random.Random(path.stem)
    for chains in second.values():
        for first, middle, then in rng.sample(chains, min(SECOND_STEPS, len(chains))):
            after = analysis(print_program(transforms.apply(middle, then.step)))
            result = transforms.verify(before, after)
            assert result.ok, f"{first.title}, then {then.title}: {result.summary()}"
