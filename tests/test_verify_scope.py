"""Scoped verification (``leir.transforms.scope``): only the nests a step
rewrote and the nests downstream that read what they write are built and
run, from the state the unchanged nests before them compute. These tests
check that it still catches what a whole-program verification catches: a
wrong change confined to a downstream nest, and a wrong change upstream
that shows only in a downstream consumer; and that a correct step on a
many-nest program builds only the nests it can affect."""

from __future__ import annotations

import pytest

import leir.evaluate
import leir.bridge.run
from leir import transforms
from leir.bridge.document import load_leir
from leir.semantics import analyze
from leir.transforms.scope import scope_of


def layer_norms(blocks: int) -> str:
    """``blocks`` layer-norm-like groups of three nests (a mean, a variance,
    an output), each on its own tensors: the shape of bench/server.py's
    1,000-line file (63 groups there)."""
    out = []
    for n in range(blocks):
        out.append(
            f"# block {n}\n"
            f"L^{{16}}_{{i}}\n  L^{{12}}_{{j}} [\n    mean{n}_{{i}} += X{n}_{{i,j}}/12.0;\n  ];\n\n"
            f"L^{{16}}_{{i}}\n  L^{{12}}_{{j}} [\n"
            f"    var{n}_{{i}} += (X{n}_{{i,j}} - mean{n}_{{i}})*(X{n}_{{i,j}} - mean{n}_{{i}})/12.0;\n  ];\n\n"
            f"L^{{16}}_{{i}}\n  L^{{12}}_{{j}} [\n"
            f"    Y{n}_{{i,j}} = (X{n}_{{i,j}} - mean{n}_{{i}})*rsqrt(var{n}_{{i}} + 1e-05)*g{n}_{{j}}*1.000"
            f" + b{n}_{{j}};\n  ];\n\n")
    return "".join(out)


def _analysis(text: str):
    doc = load_leir(text)
    assert doc.ok, doc.diagnostics
    return doc.analysis


@pytest.fixture
def builds(monkeypatch):
    """What the verification builds (``leir.bridge.run.compile_program``) and
    evaluates with NumPy (``leir.evaluate.evaluate``): for each, the set of
    tensors its nests write and its number of nests."""
    built = []
    real_build = leir.bridge.run.compile_program
    real_evaluate = leir.evaluate.evaluate

    def writes(analysis):
        return frozenset(info.equation.lhs.tensor for info in analysis.equations)

    def building(analysis, target="llvm"):
        built.append(("built", writes(analysis), len(analysis.program.units)))
        return real_build(analysis, target)

    def evaluating(analysis, inputs, **kwargs):
        built.append(("evaluated", writes(analysis), len(analysis.program.units)))
        return real_evaluate(analysis, inputs, **kwargs)

    monkeypatch.setattr(leir.bridge.run, "compile_program", building)
    monkeypatch.setattr(leir.evaluate, "evaluate", evaluating)
    return built


def _miswritten(blocks: int, right: str, wrong: str):
    """(before, after, scope) of ``layer_norms(blocks)`` with one wrong edit."""
    text = layer_norms(blocks)
    assert right in text
    before, after = _analysis(text), _analysis(text.replace(right, wrong))
    return before, after, scope_of(before, after)


def test_a_wrong_change_in_a_downstream_nest_is_caught(builds):
    before, after, scope = _miswritten(4, "g2_{j}*1.000 + b2_{j}", "g2_{j}*1.000 - b2_{j}")
    assert scope is not None and scope.region_before == (8,) and scope.compared == ("Y2",)

    result = transforms.verify(before, after)
    assert not result.ok and result.scope == scope
    assert "Y2: MISMATCH" in result.summary()
    # Only block 2 ran: its mean and variance (upstream, evaluated once per
    # seed) and its output nest before and after, built together once.
    assert set(builds) == {("evaluated", frozenset({"mean2", "var2"}), 2),
                           ("built", frozenset({"Y2", "Y2__after"}), 2)}


def test_a_wrong_change_upstream_that_shows_only_downstream_is_caught(builds):
    # mean1 is a temporary: no output is written by the changed nest itself.
    before, after, scope = _miswritten(4, "mean1_{i} += X1_{i,j}/12.0", "mean1_{i} += X1_{i,j}/11.0")
    assert scope.region_before == (3,)
    assert scope.cone == (4, 5)  # the variance and the output read mean1
    assert scope.compared == ("Y1",)

    result = transforms.verify(before, after)
    assert not result.ok
    assert "Y1: MISMATCH" in result.summary()
    # Block 1's three nests, before and after, in one build; nothing upstream
    # (mean1 reads only an input), nothing of the other blocks.
    assert builds == [("built", frozenset({"mean1", "var1", "Y1", "mean1__after", "var1__after", "Y1__after"}), 6)]


def test_a_changed_update_of_a_tensor_the_prefix_wrote_is_caught():
    # The region updates C, which the nest before it wrote: the sub-program
    # starts C from that nest's values (a copy), so a wrong update shows.
    text = ("L^{8}_{i} [\n  C_{i} = X_{i};\n];\n\nL^{8}_{i} [\n  C_{i} = C_{i} + Y_{i};\n];\n\n"
            "L^{8}_{i} [\n  D_{i} = Y_{i}*2.0;\n];\n")
    before = _analysis(text)
    same = _analysis(text.replace("C_{i} = C_{i} + Y_{i}", "C_{i} = Y_{i} + C_{i}"))
    wrong = _analysis(text.replace("C_{i} = C_{i} + Y_{i}", "C_{i} = C_{i} + Y_{i}*2.0"))

    ok = transforms.verify(before, same)
    assert ok.ok and ok.scope is not None and ok.scope.upstream == (0,) and ok.scope.compared == ("C",)
    bad = transforms.verify(before, wrong)
    assert not bad.ok and bad.scope is not None


def test_a_correct_step_on_a_many_nest_program_builds_only_the_affected_nests(builds):
    text = layer_norms(40)  # 120 nests, about 640 lines
    before = _analysis(text)
    at = text.index("L^{12}", text.index("Y30_{i,j} =") - 40)
    step = next(c.step for c in transforms.candidates(before, at) if c.step.id == "split")
    after = analyze(transforms.apply(before, step))

    result = transforms.verify(before, after)
    assert result.ok, result.summary()
    assert result.scope.total_before == 120
    assert result.scope.region_before == (92,) and result.scope.cone == () and result.scope.upstream == (90, 91)
    # One small build (block 30's output nest before and after the step)
    # and the upstream slice (block 30's mean and variance) evaluated once
    # per seed; nothing else of the 120 nests.
    assert set(builds) == {("built", frozenset({"Y30", "Y30__after"}), 2),
                           ("evaluated", frozenset({"mean30", "var30"}), 2)}
    assert [b[0] for b in builds].count("built") == 1
    assert set(result.comparisons[0]) == {"Y30"}


def test_an_unscoped_verification_agrees(builds):
    text = layer_norms(3)
    before = _analysis(text)
    wrong = _analysis(text.replace("mean1_{i} += X1_{i,j}/12.0", "mean1_{i} += X1_{i,j}/11.0"))
    whole = transforms.verify(before, wrong, scoped=False)
    assert not whole.ok and whole.scope is None
    assert builds == [("built", frozenset(f"{t}{n}" for t in ("mean", "var", "Y") for n in range(3)), 9)] * 2
