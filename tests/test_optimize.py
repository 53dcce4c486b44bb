"""``leir optimize``: the multi-step search (leir/tools/optimize.py) and its CLI.

Most tests time programs with ``FakeMeasurer``, a deterministic latency
model read off the program text, so that they test the search and not the
machine's load; they still verify every kept step with TVM (slow). One
test per strategy runs the real in-process measurer end to end.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import zlib

import pytest

from leir import transforms
from leir.tools.measuring import CONFIRM_ROUNDS, FallbackMeasurer, Paired, Timing
from leir.tools.optimize import (
    CONFIRM_COST,
    Budget,
    OptimizeError,
    optimize,
    program_key,
)
from leir.tools.ranking import access_strides, pick, rank
from leir.bridge.document import load_leir
from leir.printer import print_program
from leir.semantics import analyze

MATMUL = """\
L^{16}_{i}
  L^{24}_{j}
    L^{32}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
"""


def matmul():
    return load_leir(MATMUL).analysis


class FakeMeasurer:
    """Latency from the loop kinds in the printed program (a parallel loop
    halves it, a vector loop thirds it, a split or tile costs 5%), plus a
    deterministic jitter below 1% so ties break the same way every run.
    Counts every program it is asked to time."""

    def __init__(self):
        self.calls: list[str] = []

    def __call__(self, analyses):
        out = []
        for a in analyses:
            text = program_key(a.program)
            self.calls.append(text)
            ms = 10.0
            ms /= 2 ** text.count("P^") * 3 ** text.count("V^")
            ms *= 1.05 ** max(0, text.count("^{") - 3)
            ms *= 1 + (zlib.crc32(text.encode()) % 100) / 1e4
            out.append(Timing(ms))
        return out


def leir(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "leir.tools.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


# ------------------------------------------------------------ ranking (fast)


def test_strides_of_matmul_along_k_and_j():
    a = matmul()
    info = a.equations[0]
    assert access_strides(a, info, "k") == {"C": 0, "X": 1, "W": 24}
    assert access_strides(a, info, "j") == {"C": 1, "X": 0, "W": 1}


def test_rank_puts_parallelize_outer_loop_first_and_stride1_reorder_above_splits():
    ranked = rank(matmul())
    assert ranked[0].step == transforms.Step("parallelize", {"block": "C", "loop": "i"})
    ids = [r.step for r in ranked]
    swap_jk = ids.index(transforms.Step("reorder", {"block": "C", "loops": ["j", "k"]}))
    first_split = next(n for n, r in enumerate(ranked) if r.step.id == "split")
    assert swap_jk < first_split
    assert all(r.step.id != "bind" for r in ranked)  # a GPU step is not searched on the CPU


def test_pick_takes_one_step_per_loop_before_a_second_and_explores():
    import random

    ranked = rank(matmul())
    picks = pick(ranked, 5, random.Random(0))
    assert len(picks) == 5
    places = [(p.step.id, p.step.args.get("loop"), str(p.step.args.get("loops"))) for p in picks[:4]]
    assert len(set(places)) == 4


@pytest.mark.slow
def test_budget_memoises_by_program_and_stops_at_the_limit():
    from leir.tools.optimize import State

    fake = FakeMeasurer()
    meter = Budget(fake, 2)
    a = matmul()
    same = [State(a, program_key(a.program)), State(a, program_key(a.program))]
    meter.measure(same)
    assert len(fake.calls) == 1 and meter.used == 1
    other = analyze(transforms.apply(a, transforms.Step("parallelize", {"block": "C", "loop": "i"})))
    third = analyze(transforms.apply(a, transforms.Step("reorder", {"block": "C", "loops": ["j", "k"]})))
    states = [State(other, program_key(other.program)), State(third, program_key(third.program))]
    meter.measure(states)
    assert meter.used == 2 and len(fake.calls) == 2
    assert states[0].ms is not None and states[1].error == "budget spent"


def test_bad_arguments_raise_optimize_error():
    for kwargs in ({"steps": 0}, {"budget": 3}, {"strategy": "anneal"}, {"target": "tpu"}, {"beam_width": 0}):
        with pytest.raises(OptimizeError):
            optimize(matmul(), measurer=FakeMeasurer(), **kwargs)


# ------------------------------------------------------------ paired confirmation (fast)


def paired(before_rounds, after_rounds):
    """One run per round: the runs are the rounds."""
    return Paired(tuple(before_rounds), tuple(after_rounds), tuple(before_rounds), tuple(after_rounds))


def test_a_gain_in_every_round_beyond_three_percent_confirms():
    assert paired([10.0, 10.2, 9.9], [8.0, 8.1, 7.9]).confirms()


@pytest.mark.parametrize("before, after, why", [
    ([10.0, 10.0, 10.0], [9.8, 9.8, 9.8], "2% is within the noise"),
    ([10.0, 10.0, 10.0], [8.0, 8.0, 10.5], "slower in one round"),
    ([10.0, 10.0, 10.0], [10.0, 10.0, 10.0], "no gain"),
    ([9.0, 30.0, 30.0], [8.9, 20.0, 20.0], "the fastest runs agree: the gain is the load's"),
])
def test_no_confirmation_without_a_gain_beyond_the_spread(before, after, why):
    assert not paired(before, after).confirms(), why


def test_a_failed_side_never_confirms():
    assert not Paired((), (1.0,), (), (1.0,), "crashed").confirms()


def test_median_of_every_run_not_of_the_round_medians():
    # Two rounds of three runs: the medians of all runs decide (10 vs 8).
    p = Paired((10.0, 10.0, 12.0, 10.0, 10.0, 12.0), (8.0, 8.0, 9.0, 8.0, 8.0, 9.0), (10.0, 10.0), (8.0, 8.0))
    assert (p.before_ms, p.after_ms, p.rounds) == (10.0, 8.0, 2) and p.confirms()


# ------------------------------------------------------------ searches (verify builds kernels)


def _check_chain(start, result):
    """Every step verified against its predecessor, and the trace replays to
    the final program."""
    current = start
    for step in result.trace:
        after = analyze(transforms.apply(current, step))
        assert transforms.verify(current, after).ok, step
        current = after
    assert print_program(current.program) == print_program(result.final)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["greedy", "beam", "mcts"])
def test_strategy_respects_budget_and_keeps_verified_steps(strategy):
    fake = FakeMeasurer()
    start = matmul()
    result = optimize(start, steps=2, budget=9, strategy=strategy, measurer=fake, iterations=3)
    # Each distinct program is screened once; a paired confirmation times two
    # programs already screened, CONFIRM_ROUNDS times each, and costs CONFIRM_COST.
    screened = result.measurements - CONFIRM_COST * result.confirmations
    assert result.measurements <= 9 and result.confirmations >= 1
    assert len(set(fake.calls)) == screened
    assert len(fake.calls) == screened + 2 * CONFIRM_ROUNDS * result.confirmations
    assert 1 <= len(result.steps) <= 2
    assert result.final_ms < result.start_ms
    # The overall speedup is a ratio measured at one moment: beam and mcts
    # compare the start with the final program; greedy multiplies its steps'.
    if strategy == "greedy":
        assert result.final_check is None
        assert result.speedup == pytest.approx(math.prod(s.speedup for s in result.steps))
    else:
        assert result.speedup == pytest.approx(result.final_check.before_ms / result.final_check.after_ms)
    assert result.speedup > 1 and result.to_json()["speedup"] == round(result.speedup, 3)
    _check_chain(start, result)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_on_kept_hears_each_kept_step_with_its_programs_and_record(strategy):
    heard = []

    def on_kept(before, step, after, record):
        # Greedy tells as it keeps: the result does not exist yet.
        heard.append((print_program(before.program), step, print_program(after.program), record))

    start = matmul()
    result = optimize(start, steps=2, budget=20, strategy=strategy, measurer=FakeMeasurer(), on_kept=on_kept)
    assert result.steps, result.stop_reason
    assert [h[3] for h in heard] == result.steps  # the same records, in order
    assert [h[1] for h in heard] == result.trace
    programs = [print_program(start.program)] + [h[2] for h in heard]
    assert [h[0] for h in heard] == programs[:-1]  # each step starts where the last one left
    assert programs[-1] == print_program(result.final)
    current = start.program
    for _, step, after, _ in heard:
        current = transforms.apply(current, step)
        assert print_program(current) == after


@pytest.mark.slow
def test_greedy_every_step_is_faster_than_the_one_before():
    result = optimize(matmul(), steps=4, budget=30, strategy="greedy", measurer=FakeMeasurer())
    assert result.steps
    for s in result.steps:
        assert s.latency_after_ms < s.latency_before_ms
        assert s.speedup > 1
    for a, b in zip(result.steps, result.steps[1:]):
        assert a.latency_after_ms == b.latency_before_ms
    assert result.steps[0].id == "parallelize"  # the fake rewards it most and the heuristic ranks it first
    assert "16 iterations over" in result.steps[0].reasoning and "measured" in result.steps[0].reasoning


@pytest.mark.slow
def test_greedy_stops_when_nothing_improves():
    class Flat(FakeMeasurer):
        def __call__(self, analyses):
            self.calls.extend(program_key(a.program) for a in analyses)
            return [Timing(5.0) for _ in analyses]

    result = optimize(matmul(), steps=4, budget=12, measurer=Flat())
    assert result.steps == [] and "no measured candidate improved" in result.stop_reason
    assert print_program(result.final) == print_program(matmul().program)


@pytest.mark.slow
def test_failed_measurements_are_never_kept():
    class Broken(FakeMeasurer):
        def __call__(self, analyses):
            timings = super().__call__(analyses)
            return [t if "P^" not in self.calls[-len(analyses) + k] else Timing(None, "crashed")
                    for k, t in enumerate(timings)]

    result = optimize(matmul(), steps=2, budget=12, measurer=Broken())
    assert all(s.id != "parallelize" for s in result.steps)


class LuckyFirst(FakeMeasurer):
    """The winner's curse, on purpose: the first timing of a candidate comes
    out at ``lucky_ms``, faster than anything (a lucky moment); later timings
    of it, every timing of the starting program, and every timing of a
    program without luck (``lucky`` of its text false, or past ``lucky_count``
    lucky programs) are the true latency (``FakeMeasurer``'s)."""

    def __init__(self, lucky_ms: float = 3.0, lucky=lambda text: True, lucky_count: int | None = None):
        super().__init__()
        self.lucky_ms, self.lucky, self.lucky_count = lucky_ms, lucky, lucky_count
        self.true = FakeMeasurer()
        self.lucky_programs: list[str] = []

    def __call__(self, analyses):
        out = []
        for a in analyses:
            text = program_key(a.program)
            first = text not in self.calls and bool(self.calls)  # the start's first timing is true
            self.calls.append(text)
            [t] = self.true([a])
            if first and self.lucky(text) and (self.lucky_count is None or len(self.lucky_programs) < self.lucky_count):
                self.lucky_programs.append(text)
                out.append(Timing(self.lucky_ms))
            else:
                out.append(Timing(t.ms))
        return out


@pytest.mark.slow
def test_a_lucky_first_timing_without_a_real_gain_is_not_kept():
    class NoGain(LuckyFirst):
        """Nothing is truly faster than the start (the true latency is flat)."""

        def __init__(self):
            super().__init__()
            self.true = lambda analyses: [Timing(10.0) for _ in analyses]

    fake = NoGain()
    result = optimize(matmul(), steps=2, budget=16, measurer=fake)
    assert result.steps == []
    assert result.unconfirmed == result.confirmations >= 1
    assert "paired re-timing" in result.stop_reason or "confirmed" in result.stop_reason
    assert print_program(result.final) == print_program(matmul().program)


@pytest.mark.slow
def test_a_real_gain_is_kept_even_when_a_luckier_candidate_is_re_timed_first():
    # One serial candidate looks 3x faster once; parallelize is truly 2x faster.
    fake = LuckyFirst(lucky=lambda text: "P^" not in text, lucky_count=1)
    result = optimize(matmul(), steps=1, budget=30, measurer=fake)
    assert len(fake.lucky_programs) == 1 and result.confirmations == 2 and result.unconfirmed == 1
    assert [s.id for s in result.steps] == ["parallelize"], result.stop_reason
    # The step's figures are the paired re-timing's (true latencies), not the
    # lucky screening figure.
    [step] = result.steps
    true_start = fake.true([matmul()])[0].ms
    true_final = fake.true([analyze(result.final)])[0].ms
    assert step.latency_before_ms == pytest.approx(true_start)
    assert step.latency_after_ms == pytest.approx(true_final)
    assert step.latency_after_ms != fake.lucky_ms
    assert "Confirmed by 3 paired rounds" in step.reasoning


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["beam", "mcts"])
def test_beam_and_mcts_return_the_start_when_the_best_gain_was_luck(strategy):
    class NoGain(LuckyFirst):
        def __init__(self):
            super().__init__()
            self.true = lambda analyses: [Timing(10.0) for _ in analyses]

    result = optimize(matmul(), steps=2, budget=14, strategy=strategy, measurer=NoGain(), iterations=3)
    assert result.steps == [] and result.unconfirmed == 1
    assert "paired re-timing" in result.stop_reason


# ------------------------------------------------------------ end to end (real timings)


@pytest.mark.slow
def test_fallback_measurer_times_a_program():
    [t] = FallbackMeasurer(repeat=3, min_repeat_ms=1)([matmul()])
    assert t.ok and 0 < t.ms < 1000


@pytest.mark.slow
def test_fallback_measurer_times_two_programs_turn_about():
    after = analyze(transforms.apply(matmul(), transforms.Step("reorder", {"block": "C", "loops": ["j", "k"]})))
    p = FallbackMeasurer(repeat=3, min_repeat_ms=1).paired(matmul(), after, rounds=2)
    assert p.ok and p.rounds == 2
    assert len(p.before_runs) == len(p.after_runs) == 6 and all(x > 0 for x in p.before_runs + p.after_runs)


@pytest.mark.slow
def test_cli_json_shape_write_and_replay(tmp_path):
    src = tmp_path / "mm.leir"
    src.write_text(MATMUL)
    out = tmp_path / "mm_opt.leir"
    # The default measurer: the measurement engine, with a cache of its own.
    result = leir("optimize", str(src), "--steps", "2", "--budget", "5", "--json", "--write", str(out),
                  env={"LEIR_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {"start_ms", "steps", "final"} <= set(data)
    assert data["measurements"] <= 5 and data["measurer"] == "EngineMeasurer"
    for s in data["steps"]:
        assert set(s) == {"id", "args", "latency_before_ms", "latency_after_ms", "speedup", "reasoning"}
        assert s["latency_after_ms"] < s["latency_before_ms"]
        assert "measured" in s["reasoning"]
    assert out.read_text() == data["final"]
    assert leir("check", str(out)).returncode == 0
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(data["steps"]))
    replayed = leir("replay", str(src), str(trace))
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == out.read_text()


@pytest.mark.slow
def test_cli_mcts_runs_with_the_fallback_measurer(tmp_path):
    src = tmp_path / "mm.leir"
    src.write_text(MATMUL)
    result = leir("optimize", str(src), "--steps", "2", "--budget", "4", "--strategy", "mcts",
                  "--iterations", "2", env={"LEIR_MEASURE": "fallback"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("start: ") and "final: " in result.stdout


@pytest.mark.parametrize("args, fragment", [
    (["--steps", "0"], "--steps must be at least 1"),
    (["--steps", "2", "--budget", "3"], "--budget must be at least 4"),
    (["--steps", "2", "--strategy", "anneal"], "invalid choice"),
    (["--steps", "x"], "invalid int value"),
    ([], "--steps"),
    (["--steps", "2", "--write", "/nonexistent-dir/out.leir"], "no such directory"),
])
def test_cli_bad_arguments_are_one_line_errors(tmp_path, args, fragment):
    src = tmp_path / "mm.leir"
    src.write_text(MATMUL)
    assert_one_line_error(leir("optimize", str(src), *args), fragment)


def test_cli_missing_or_broken_file_is_one_line_error(tmp_path):
    assert_one_line_error(leir("optimize", str(tmp_path / "none.leir"), "--steps", "2"), "none.leir")
    bad = tmp_path / "bad.leir"
    bad.write_text(MATMUL.replace("X_{i,k}", "X_{i,q}"))
    assert_one_line_error(leir("optimize", str(bad), "--steps", "2"), "bad.leir")


class ReorderFirst:
    """A ranker that puts every reorder step first and the rest after, in
    the catalogue's order: not the heuristic's order, which ranks
    parallelize first on this matmul."""

    name = "reorder-first"

    def score(self, ctx, steps, target):
        return [(1.0 if s.id == "reorder" else 0.0, ()) for s in steps]


def test_the_ranker_given_orders_the_steps_greedy_measures():
    fake = FakeMeasurer()
    result = optimize(matmul(), steps=1, budget=6, strategy="greedy", measurer=fake, ranker=ReorderFirst())
    assert result.ranker == "reorder-first" and result.to_json()["ranker"] == "reorder-first"
    # calls[0] is the start; the first candidate timed is the ranker's first: two loops swapped.
    first = fake.calls[1]
    reorders = {program_key(transforms.apply(matmul().program, c.step)) for c in transforms.candidates(matmul(), None)
                if c.step.id == "reorder"}
    assert reorders and first in reorders, first
    plain = FakeMeasurer()
    assert optimize(matmul(), steps=1, budget=6, strategy="greedy", measurer=plain).ranker == "heuristic"
    assert "P^" in plain.calls[1]


def test_optimize_takes_a_ranker_on_the_command_line_and_says_when_the_model_is_missing(tmp_path):
    src = tmp_path / "m.leir"
    src.write_text(MATMUL)
    done = leir("optimize", str(src), "--steps", "1", "--budget", "5", "--ranker", "no-such-ranker", "--json",
                "--strategy", "greedy")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ranker"] == "heuristic"
    assert "leir optimize: ranker 'no-such-ranker': nothing is installed" in done.stderr
