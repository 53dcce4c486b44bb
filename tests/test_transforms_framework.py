"""The machinery every transformation shares: steps as JSON, stale and
malformed steps, typed errors, traces that replay, splicing that keeps the
user's text."""

from __future__ import annotations

import json

import pytest

from leir import transforms
from leir.bridge.document import load_leir
from leir.printer import print_program
from leir.transforms import BadStep, StaleStep, Step, UnknownTransform, apply, candidates, replay
from leir.transforms.steps.split import WrongFactors

SOFTMAX = """\
# row softmax
L^{16}_{i}
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

# sum of exp
L^{16}_{i}
  L^{10}_{j} [
    Z_{i} += exp(X_{i,j} - M_{i});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
  ];
"""


def analysis(text: str = SOFTMAX):
    doc = load_leir(text)
    assert doc.ok
    return doc.analysis


def test_registry_ids_are_unique_and_match_modules():
    ids = [t.ID for t in transforms.ALL]
    assert len(ids) == len(set(ids))
    for t in transforms.ALL:
        assert transforms.get(t.ID) is t


def test_unknown_transform_is_a_typed_error():
    with pytest.raises(UnknownTransform) as e:
        apply(analysis(), Step("frobnicate", {}))
    assert "split" in e.value.detail


def test_loops_are_named_by_block_because_loop_names_repeat():
    steps = [c.step.args for c in candidates(analysis(), only=("split",))]
    blocks = {(a["block"], a["loop"]) for a in steps}
    assert {("M", "i"), ("Z", "i"), ("Y", "i"), ("M", "j")} <= blocks


def test_cursor_on_a_loop_header_selects_that_loop_only():
    text = SOFTMAX
    at = text.index("L^{10}_{j} [\n    Z") + 3
    found = candidates(analysis(text), at, only=("split",))
    assert found and {(c.step.args["block"], c.step.args["loop"]) for c in found} == {("Z", "j")}


def test_untouched_units_keep_their_text_and_comments():
    result = print_program(apply(analysis(), Step("split", {"block": "Y", "loop": "j", "factors": [2, 5]})))
    assert result.startswith(SOFTMAX[: SOFTMAX.index("L^{16}_{i}\n  L^{10}_{j} [\n    Y")])
    assert "L^{2}_{j_0}" in result and "# sum of exp" in result


def test_stale_step_names_what_is_missing():
    with pytest.raises(StaleStep) as e:
        apply(analysis(), Step("split", {"block": "Q", "loop": "i", "factors": [2, 8]}))
    assert "no block Q" in str(e.value) and "M, Z, Y" in e.value.detail
    with pytest.raises(StaleStep) as e:
        apply(analysis(), Step("split", {"block": "M", "loop": "k", "factors": [2, 8]}))
    assert "no loop k" in str(e.value)


def test_malformed_arguments_are_bad_steps():
    for args in ({"block": "M", "loop": "i"}, {"block": "M", "loop": "i", "factors": "8"},
                 {"block": 3, "loop": "i", "factors": [2, 8]}, {"block": "M", "loop": "i", "factors": [2, 8, 1]}):
        with pytest.raises(BadStep):
            apply(analysis(), Step("split", args))
    with pytest.raises(BadStep):
        transforms.step_from_json(["split"])


def test_wrong_factors_have_short_and_detailed_messages():
    with pytest.raises(WrongFactors) as e:
        apply(analysis(), Step("split", {"block": "M", "loop": "i", "factors": [3, 8]}))
    assert str(e.value) == "factors [3, 8] do not split 16 iterations"
    assert "rounded up (2 for inner 8)" in e.value.detail
    assert e.value.span is not None


def test_a_program_with_errors_is_not_transformed():
    bad = SOFTMAX.replace("X_{i,j} - M_{i})/Z", "X_{i,q} - M_{i})/Z")
    doc = load_leir(bad)
    assert candidates(doc.analysis) == []
    with pytest.raises(transforms.NotApplicable):
        apply(doc.analysis, Step("split", {"block": "M", "loop": "i", "factors": [2, 8]}))


@pytest.mark.slow
def test_trace_replays_to_the_same_program_on_a_fresh_parse():
    first = Step("split", {"block": "M", "loop": "j", "factors": [2, 5]})
    program = apply(analysis(), first)
    second = Step("split", {"block": "M", "loop": "i", "factors": [4, 4]})
    program = apply(analysis(print_program(program)), second)
    trace = [json.loads(json.dumps(s.to_json())) for s in (first, second)]
    replayed = replay(load_leir(SOFTMAX).program, [transforms.step_from_json(s) for s in trace])
    assert print_program(replayed) == print_program(program)


@pytest.mark.slow
def test_verify_catches_a_wrong_program():
    good = analysis()
    wrong = analysis(SOFTMAX.replace("/Z_{i}", "/(Z_{i} + 1.0)"))
    result = transforms.verify(good, wrong)
    assert not result.ok and "Y" in result.summary()
    assert transforms.verify(good, analysis()).ok


def test_listing_candidates_never_lowers_builds_or_runs(monkeypatch):
    """Listing is what an editor does on every cursor move: it must not
    lower, build or run anything (speed is measured in bench/transforms.py,
    not here)."""
    import leir.bridge.lower
    import leir.bridge.run
    from pathlib import Path

    def forbidden(*args, **kwargs):
        raise AssertionError("candidates() lowered, built or ran a program")

    monkeypatch.setattr(leir.bridge.lower, "lower", forbidden)
    monkeypatch.setattr(leir.bridge.run, "build", forbidden)
    monkeypatch.setattr(leir.bridge.run, "compile_program", forbidden)
    examples = Path(__file__).resolve().parent.parent / "examples"
    for path in sorted(examples.glob("*.leir")):
        doc = load_leir(path.read_text())
        assert candidates(doc.analysis), path.stem
