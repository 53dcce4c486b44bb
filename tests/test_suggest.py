"""leir.tools.suggest: the steps at a cursor, ranked, with cached latencies only."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from leir.bridge.document import load_leir
from leir.measure import MeasurementCache
from leir.measure.key import measurement_key
from leir.measure.measurement import Measurement
from leir.printer import print_program
from leir.semantics import analyze
from leir.tools.measuring import MeasuredLookup, StepOutcomes, program_digest
from leir.tools.suggest import Suggestion, order, suggest
from leir.transforms import Step

TRANSPOSE = """\
# Y = X.T
L^{32}_{i}
  L^{16}_{j} [
    Y_{i,j} = X_{j,i};
  ];
"""

SPLIT_I = Step("split", {"block": "Y", "loop": "i", "factors": [4, 8]})
SPLIT_I_AFTER = """\
# Y = X.T
L^{4}_{i_0}
  L^{8}_{i_1}
    L^{16}_{j} [
      Y_{i_0*8+i_1,j} = X_{j,i_0*8+i_1};
    ];
"""


def at_marker(text: str) -> tuple[str, int]:
    at = text.index("$0")
    return text[:at] + text[at + 2:], at


def fake_measurement(lookup: MeasuredLookup, analysis, ms: float) -> Measurement:
    """A stored measurement of ``analysis`` (test data for the lookup, not a claim)."""
    key = measurement_key(analysis, lookup.target_key, lookup.device, lookup.toolchain)
    return Measurement(ms, ms, ms, 1, 0.0, lookup.target_key, lookup.device, True, {}, False, None, None,
                       mean_ms=ms, number=1, results_ms=(ms,), key=key, measured_at=time.time())


@pytest.fixture
def lookup(tmp_path) -> MeasuredLookup:
    cache = MeasurementCache(tmp_path)
    return MeasuredLookup("llvm", "test-cpu", "test-toolchain", cache, StepOutcomes(tmp_path))


def store(lookup: MeasuredLookup, analysis, ms: float) -> None:
    m = fake_measurement(lookup, analysis, ms)
    lookup.cache.store(m, program=print_program(analysis.complete_program()), toolchain=lookup.toolchain, shapes={})


def test_suggestions_on_a_loop_header_act_on_that_loop_best_first():
    text, at = at_marker(TRANSPOSE.replace("L^{32}_{i}", "L^{32}_{$0i}"))

    found = suggest(text, "leir", at)

    assert found
    assert all(s.step.args.get("loop") in ("i", None) for s in found)
    assert [s.score for s in found] == sorted((s.score for s in found), reverse=True)
    parallel = next(s for s in found if s.step.id == "parallelize")
    assert f"32 iterations over {os.cpu_count()} cores" in parallel.facts
    assert parallel.kernel is None
    assert text[parallel.span.start:parallel.span.end].startswith("L^{32}_{i}")


def test_scores_at_the_cursor_are_rank_scores(examples_dir):
    from leir.tools.ranking import rank

    compared = 0
    for path in sorted(examples_dir.glob("*.leir")):
        text = path.read_text()
        ranked = {r.step.key: (r.score, r.facts) for r in rank(load_leir(text).analysis, "llvm")}
        for s in suggest(text, "leir", len(text) // 2):
            if s.step.key in ranked:
                compared += 1
                assert (s.score, s.facts) == ranked[s.step.key], (path.name, s.step)
            else:
                assert s.score == 0.0  # a step the search never takes
    assert compared > 100


def test_unmeasured_suggestions_have_the_plain_title():
    text, at = at_marker(TRANSPOSE.replace("L^{32}_{i}", "L^{32}_{$0i}"))

    split = next(s for s in suggest(text, "leir", at) if s.step == SPLIT_I)

    assert split.before is None and split.after is None and split.speedup is None
    assert split.label == split.title == "Split loop i by 8"


def test_a_document_with_errors_has_no_suggestions():
    assert suggest("L^{4}_{i} [ Y_{i} = X_{i} $ 1; ];\n", "leir", 3) == []


def test_measured_steps_come_first_with_their_speedup(lookup):
    text, at = at_marker(TRANSPOSE.replace("L^{32}_{i}", "L^{32}_{$0i}"))
    before = load_leir(text).analysis
    after = load_leir(SPLIT_I_AFTER).analysis
    store(lookup, before, 3.0)
    store(lookup, after, 1.5)
    lookup.outcomes.record(before, SPLIT_I, after)

    found = suggest(text, "leir", at, measured=lookup)

    assert found[0].step == SPLIT_I
    assert found[0].label == "Split loop i by 8 (measured 2.0x)"
    assert found[0].before.median_ms == 3.0 and found[0].after.median_ms == 1.5
    # Every other step has the measured "before" but no known "after".
    assert all(s.before is not None and s.after is None for s in found[1:])


def test_an_outcome_without_a_measured_after_is_not_measured(lookup):
    text, at = at_marker(TRANSPOSE.replace("L^{32}_{i}", "L^{32}_{$0i}"))
    before = load_leir(text).analysis
    store(lookup, before, 3.0)
    lookup.outcomes.record(before, SPLIT_I, load_leir(SPLIT_I_AFTER).analysis)

    split = next(s for s in suggest(text, "leir", at, measured=lookup) if s.step == SPLIT_I)

    assert split.after is None and split.label == "Split loop i by 8"


def test_outcomes_are_keyed_by_program_structure_not_layout(tmp_path):
    outcomes = StepOutcomes(tmp_path)
    before = load_leir(TRANSPOSE).analysis
    outcomes.record(before, SPLIT_I, load_leir(SPLIT_I_AFTER).analysis)
    relaid = load_leir("L^{32}_{i} L^{16}_{j} [ Y_{i,j} = X_{j,i}; ];").analysis  # no comment, one line

    found = outcomes.after(relaid, SPLIT_I)

    assert program_digest(relaid) == program_digest(before)
    assert program_digest(found) == program_digest(load_leir(SPLIT_I_AFTER).analysis)
    assert outcomes.after(before, Step("split", {"block": "Y", "loop": "j", "factors": [2, 8]})) is None
    assert outcomes.after(before, SPLIT_I, namespace="tvmscript:transpose") is None


def test_order_puts_the_greatest_measured_speedup_first(lookup):
    a = load_leir(TRANSPOSE).analysis
    m = {ms: fake_measurement(lookup, a, ms) for ms in (1.0, 2.0, 4.0)}
    plain = Suggestion(SPLIT_I, "a", None, None, 90.0, ())
    twice = Suggestion(SPLIT_I, "b", None, None, 10.0, (), m[4.0], m[2.0])
    four = Suggestion(SPLIT_I, "c", None, None, 5.0, (), m[4.0], m[1.0])

    assert [s.title for s in order([plain, twice, four])] == ["c", "b", "a"]


def test_listing_imports_no_tvm_on_any_example(examples_dir):
    probe = (
        "import sys\n"
        "from pathlib import Path\n"
        "from leir.tools.suggest import suggest\n"
        "found = 0\n"
        f"for path in sorted(Path({str(examples_dir)!r}).glob('*.leir')):\n"
        "    text = path.read_text()\n"
        "    for at in (None, len(text) // 3, 2 * len(text) // 3):\n"
        "        found += len(suggest(text, 'leir', at))\n"
        "print(found > 0, 'tvm' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)

    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]


@pytest.mark.slow
def test_python_kernel_suggestions_name_its_blocks_and_ranges():
    from leir.bridge.lower import to_tvmscript

    text = to_tvmscript(analyze(load_leir(TRANSPOSE).program), "transpose")
    at = text.index("for i, j")

    found = suggest(text, "tvmscript", at)

    assert found and all(s.kernel == "transpose" for s in found)
    assert all(s.step.args.get("block") in ("Y", None) for s in found)
    split = next(s for s in found if s.step.id == "split")
    assert text[split.span.start:split.span.end].startswith("for i, j")


# ------------------------------------------------------------ plans (issue 14)


def _plan_chain(text: str, steps: list[Step]):
    from leir import transforms

    programs = [load_leir(text).analysis]
    for step in steps:
        programs.append(analyze(transforms.apply(programs[-1], step)))
    return programs


def test_a_recorded_plan_ranks_its_next_step_first_and_says_where_it_leads(lookup):
    from leir.explain.editor import step_text

    # A plan of three steps: split i, parallelize its outer part, vectorize j.
    steps = [SPLIT_I, Step("parallelize", {"block": "Y", "loop": "i_0"}), Step("vectorize", {"block": "Y", "loop": "j"})]
    programs = _plan_chain(TRANSPOSE, steps)
    store(lookup, programs[0], 13.0)
    store(lookup, programs[-1], 0.41)
    lookup.outcomes.record_plan(programs[:-1], steps, programs[-1], "a tiled contraction")

    found = suggest(TRANSPOSE, "leir", measured=lookup)
    assert found[0].step == SPLIT_I
    assert found[0].label == "Split loop i by 8 (plan step 1 of 3)"
    assert found[0].plan_text == "step 1 of 3 toward a tiled contraction measured at 0.41 ms (now 13 ms)"
    assert found[0].to_json()["plan"]["end_figure"] == "measured"
    assert all(s.plan is None for s in found[1:])
    hover = step_text(programs[0], found[0], "leir", "llvm", lookup)
    assert "step 1 of 3 toward a tiled contraction measured at 0.41 ms (now 13 ms)" in hover

    # After the first step, the second is offered first, as step 2 of 3.
    after = suggest(print_program(programs[1].program), "leir", measured=lookup)
    assert after[0].step == steps[1] and after[0].label.endswith("(plan step 2 of 3)")


def test_a_plans_next_step_that_the_listing_does_not_offer_is_offered_where_it_applies(lookup):
    # Plans reorder a run of loops in one step ("order"), which the listing
    # never offers (a run has too many orders): the editor still offers it.
    text = """\
L^{8}_{i}
  L^{4}_{j}
    L^{6}_{k} [
      Y_{i,j,k} = X_{i,j,k}*2.0;
    ];
"""
    step = Step("reorder", {"block": "Y", "order": ["k", "i", "j"]})
    programs = _plan_chain(text, [step])
    lookup.outcomes.record_plan(programs[:-1], [step], programs[-1], "parallel rows")
    found = suggest(text, "leir", measured=lookup)
    assert found[0].step == step
    assert found[0].label == "Reorder loops to k, i, j (plan step 1 of 1)"
    assert text[found[0].span.start:].startswith("L^{8}_{i}")
    # At a cursor on the nest's loops it is offered; away from them, or once
    # the program has changed so that the step no longer applies, it is not.
    assert suggest(text, "leir", text.index("L^{4}_{j}"), measured=lookup)[0].step == step
    other = text + "\nL^{3}_{q} [\n  Z_{q} = X_{q,0,0};\n];\n"
    lookup.outcomes.record_plan([load_leir(other).analysis], [step], programs[-1], "parallel rows")
    assert all(s.step != step for s in suggest(other, "leir", other.index("Z_{q}"), measured=lookup))
    stale = Step("reorder", {"block": "Y", "order": ["k", "q"]})
    lookup.outcomes.record_plan([load_leir(other).analysis], [stale], programs[-1], "parallel rows")
    assert all(s.step != stale for s in suggest(other, "leir", measured=lookup))


def test_a_plan_whose_end_was_not_measured_shows_the_predicted_figure_or_none(lookup):
    steps = [SPLIT_I]
    programs = _plan_chain(TRANSPOSE, steps)
    lookup.outcomes.record_plan(programs[:-1], steps, programs[-1], "parallel rows", predicted_ms=0.5)
    found = suggest(TRANSPOSE, "leir", measured=lookup)
    assert found[0].plan_text == "step 1 of 1 toward parallel rows predicted at 0.5 ms"
    assert found[0].to_json()["plan"]["end_figure"] == "predicted"
    lookup.outcomes.record_plan(programs[:-1], steps, programs[-1], "parallel rows")
    found = suggest(TRANSPOSE, "leir", measured=lookup)
    assert found[0].plan_text == "step 1 of 1 toward parallel rows"  # no figure is made up
    # Without a lookup (no cache) there is no plan: the heuristic order stands.
    assert all(s.plan is None for s in suggest(TRANSPOSE, "leir"))
