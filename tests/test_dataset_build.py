"""The dataset builder end to end (issue 7): a tiny build of 2 workloads and
3 steps, measured for real through the measurement engine.

Every field of every sample is checked; every sample's step re-applies with
``leir apply`` to its ``before`` and prints its ``after``; every sample
marked verified passes ``leir.transforms.verify`` again; the build resumes
after a kill without losing or repeating a sample, and is deterministic for
a seed given the same measurement cache.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from leir.tools.dataset import records
from leir.tools.dataset.build import PROGRESS, SAMPLES, BuildConfig, DatasetError, build, read_samples

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
WORKLOADS = ["matmul.leir", "softmax.leir"]
STEPS = 3


def _config(tmp: Path, out: str, **kw) -> BuildConfig:
    base = dict(workloads=str(EXAMPLES), out=str(tmp / out), variants=1, steps=STEPS, budget=3, seed=7,
                only=list(WORKLOADS), cache_dir=str(tmp / "cache"))
    base.update(kw)
    return BuildConfig(**base)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dataset")
    summary = build(_config(tmp, "out"), progress=False)
    return tmp, summary, list(read_samples(tmp / "out"))


def test_tiny_build_writes_samples_for_both_workloads_and_their_variants(tiny):
    _, summary, samples = tiny
    assert summary.samples_written == len(samples) > 0
    assert {s["workload"] for s in samples} == set(WORKLOADS)
    variants = {(s["workload"], s["variant"]) for s in samples}
    assert {v for _, v in variants} >= {"orig", "v1"}, variants
    assert max(s["step_index"] for s in samples) <= STEPS - 1


def test_every_field_follows_the_schema(tiny):
    from leir.bridge.document import load_leir
    from leir.format import canonical_program
    from leir.printer import print_program
    from leir.transforms import get

    _, _, samples = tiny
    assert len({s["id"] for s in samples}) == len(samples)
    for s in samples:
        records.validate(s)
        assert set(s) == set(records.FIELDS)
        # Canonical LEIR: printing the canonical form of the text gives the text.
        for text in (s["before"], s["after"]):
            analysis = load_leir(text).analysis
            assert analysis.ok
            assert print_program(canonical_program(analysis)) == text
        assert s["before"] != s["after"]
        assert s["strategy"] == s["step"]["id"]
        assert s["steptp_strategy"] == get(s["step"]["id"]).STEPTP
        assert s["id"] == records.sample_id(s["trajectory"], s["step_index"], s["step"])
        assert s["trajectory"] == f"{s['workload']}/{s['variant']}/t0"
        # The known tensors are the program's.
        tensors = load_leir(s["before"]).analysis.tensors
        assert {t["name"]: (t["role"], t["dtype"], tuple(t["shape"])) for t in s["tensors"]} == \
            {t.name: (t.role, t.dtype, t.shape) for t in tensors.values()}
        assert s["target"] == "llvm" and s["device"]
        assert s["latency_before_min_ms"] <= s["latency_before_ms"] <= s["latency_before_max_ms"]
        if s["latency_after_ms"] is not None:
            assert s["latency_after_min_ms"] <= s["latency_after_ms"] <= s["latency_after_max_ms"]
            assert s["speedup"] == pytest.approx(s["latency_before_ms"] / s["latency_after_ms"])
            assert s["runs"] == 3
        else:
            assert s["speedup"] is None and s["error"] and not s["verified"]
        v = s["verification"]
        assert v["method"] == "tvm-vs-start" and v["seeds"] == [0, 1, 2]
        assert v["rel_tolerance"] == 5e-3 and v["mse_tolerance"] == 1e-5
        if s["verified"]:
            assert v["summary"] == "ok" and v["criterion"]
            assert v["abs_tolerance"] == {"f32": 1e-3}
        # The reasoning closes with the measured effect, from the same figures.
        assert s["reasoning"].strip()
        if s["latency_after_ms"] is not None:
            assert s["reasoning_facts"]["latency_before_ms"] == pytest.approx(s["latency_before_ms"])
            assert s["reasoning_facts"]["latency_after_ms"] == pytest.approx(s["latency_after_ms"])
        if s["variant"] == "orig":
            assert s["variant_sizes"] == {}
        else:
            assert s["variant_sizes"] and all(k.isdigit() and v >= 8 for k, v in s["variant_sizes"].items())


def test_trajectories_chain_one_chosen_step_per_state(tiny):
    _, _, samples = tiny
    by_state = {}
    for s in samples:
        by_state.setdefault((s["trajectory"], s["step_index"]), []).append(s)
    for (tid, k), group in by_state.items():
        chosen = [s for s in group if s["chosen"]]
        assert len(chosen) <= 1
        assert len({s["before"] for s in group}) == 1
        for s in group:
            assert (s["policy"] is not None) == s["chosen"]
        if chosen:
            c = chosen[0]
            assert c["verified"] and c["policy"] in ("exploit", "explore")
            if c["policy"] == "exploit":
                fastest = min(s["latency_after_ms"] for s in group if s["verified"])
                assert c["latency_after_ms"] == fastest
            nxt = by_state.get((tid, k + 1))
            if nxt:
                # The after of step k is the before of step k+1, measured once.
                assert nxt[0]["before"] == c["after"]
                assert nxt[0]["latency_before_ms"] == c["latency_after_ms"]
        elif (tid, k + 1) in by_state:
            pytest.fail(f"{tid}: step {k + 1} without a chosen step {k}")
    # Steps that made the program slower are recorded and labelled as such.
    assert any(s["speedup"] is not None and s["speedup"] < 1 for s in samples)


def test_every_step_reapplies_with_leir_apply(tiny, tmp_path, capsys):
    from leir.tools.cli import main

    _, _, samples = tiny
    for s in samples:
        path = tmp_path / Path(s["workload"]).name
        path.write_text(s["before"], encoding="utf-8")
        capsys.readouterr()
        assert main(["apply", str(path), "--step", json.dumps(s["step"])]) == 0
        assert capsys.readouterr().out == s["after"], s["id"]


def test_every_verified_sample_reverifies(tiny):
    from leir.bridge.document import load_leir
    from leir.transforms import verify

    _, _, samples = tiny
    verified = [s for s in samples if s["verified"]]
    assert verified
    for s in verified:
        result = verify(load_leir(s["before"]).analysis, load_leir(s["after"]).analysis)
        assert result.ok, (s["id"], result.summary())


def test_a_second_build_into_the_same_directory_adds_nothing(tiny):
    tmp, _, samples = tiny
    again = build(_config(tmp, "out"), progress=False)
    assert again.samples_written == 0 and again.trajectories_run == 0
    assert list(read_samples(tmp / "out")) == samples


def build_killed_after(cfg, kill_after: int, monkeypatch) -> None:
    """``build(cfg)`` interrupted (KeyboardInterrupt) when its sample number
    ``kill_after + 1`` is about to be written: those already written for
    that state are not committed yet."""
    real = records.validate
    calls = {"n": 0}

    def validate_then_die(sample):
        calls["n"] += 1
        if calls["n"] > kill_after:
            raise KeyboardInterrupt
        real(sample)

    monkeypatch.setattr(records, "validate", validate_then_die)
    with pytest.raises(KeyboardInterrupt):
        build(cfg, progress=False)
    monkeypatch.setattr(records, "validate", real)


@pytest.mark.parametrize("kill_after", [1, 5, 13])
def test_a_killed_build_resumes_where_it_stopped(tiny, monkeypatch, kill_after):
    tmp, _, samples = tiny
    out = f"killed{kill_after}"
    build_killed_after(_config(tmp, out), kill_after, monkeypatch)
    path = tmp / out / PROGRESS
    progress = json.loads(path.read_text()) if path.exists() else {"done": [], "bytes": 0}
    assert not progress["done"]  # killed before any trajectory finished
    summary = build(_config(tmp, out), progress=False)
    resumed = list(read_samples(tmp / out))
    assert Counter(s["id"] for s in resumed) == Counter(s["id"] for s in samples)
    assert sorted(resumed, key=lambda s: s["id"]) == sorted(samples, key=lambda s: s["id"])
    # What was committed before the kill is kept, not written again.
    committed = (tmp / out / SAMPLES).read_bytes()[: progress["bytes"]].count(b"\n")
    assert summary.samples_written == len(samples) - committed


def test_the_same_seed_and_cache_give_the_same_dataset(tiny):
    tmp, _, samples = tiny
    summary = build(_config(tmp, "again"), progress=False)
    # Nothing measured again but failures, which the cache does not keep.
    assert summary.measurements - summary.cache_hits <= sum(s["latency_after_ms"] is None for s in samples)
    assert sorted(read_samples(tmp / "again"), key=lambda s: s["id"]) == sorted(samples, key=lambda s: s["id"])


def test_a_cache_measured_without_the_reference_check_is_verified_with_numpy(tiny, tmp_path):
    # Measurements made by `leir measure` or the editor were checked against
    # each program's own evaluation: the build then compares the NumPy
    # evaluations of the programs before and after each step itself.
    import sqlite3

    tmp, _, samples = tiny
    shutil.copytree(tmp / "cache", tmp_path / "cache")
    conn = sqlite3.connect(tmp_path / "cache" / "measurements.sqlite", isolation_level=None)
    assert conn.execute("SELECT COUNT(*) FROM measurements WHERE checked_against IS NOT NULL").fetchone()[0] > 0
    conn.execute("UPDATE measurements SET checked_against = NULL")
    conn.close()
    summary = build(_config(tmp_path, "numpy", cache_dir=str(tmp_path / "cache")), progress=False)
    assert summary.cache_hits == summary.measurements  # nothing built again
    again = sorted(read_samples(tmp_path / "numpy"), key=lambda s: s["id"])
    assert [s["id"] for s in again] == sorted(s["id"] for s in samples)
    for s in again:
        assert s["verification"]["method"] == "engine+evaluate" and s["verified"], s["verification"]


def test_resuming_with_other_settings_is_refused(tiny):
    tmp, _, _ = tiny
    with pytest.raises(DatasetError, match="other settings .*steps"):
        build(_config(tmp, "out", steps=STEPS + 1), progress=False)


class _Reversed:
    """The heuristic's order, reversed: what it ranks last is tried first."""

    name = "reversed"

    def score(self, ctx, steps, target):
        from leir.tools.ranking import HEURISTIC

        return [(-score, facts) for score, facts in HEURISTIC.score(ctx, steps, target)]


def _first_state_steps(samples) -> set[str]:
    return {json.dumps(s["step"], sort_keys=True) for s in samples
            if s["step_index"] == 0 and s["variant"] == "orig" and s["workload"] == "matmul.leir"}


def test_a_named_ranker_orders_the_candidates_and_is_part_of_the_settings(tiny, monkeypatch):
    from leir.tools import ranking

    tmp, _, samples = tiny
    asked = []
    monkeypatch.setattr(ranking, "load_ranker", lambda name: asked.append(name) or _Reversed())
    build(_config(tmp, "reversed", steps=1, only=["matmul.leir"]), progress=False)  # the heuristic
    build(_config(tmp, "by-reversed", steps=1, only=["matmul.leir"], ranker="reversed"), progress=False)
    assert asked == ["reversed"]  # the heuristic is not loaded by name
    heuristic = _first_state_steps(read_samples(tmp / "reversed"))
    reversed_ = _first_state_steps(read_samples(tmp / "by-reversed"))
    assert heuristic == _first_state_steps(samples) and reversed_ and reversed_ != heuristic
    assert json.loads((tmp / "by-reversed" / "config.json").read_text())["ranker"] == "reversed"
    with pytest.raises(DatasetError, match="other settings .*ranker"):
        build(_config(tmp, "out", ranker="reversed"), progress=False)


def test_a_ranker_that_does_not_load_stops_the_build_before_anything_is_written(tmp_path):
    with pytest.raises(DatasetError, match="--ranker no-such: it did not load .*nothing is installed"):
        build(_config(tmp_path, "none", ranker="no-such"), progress=False)
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("workload, step", [
    # The copy reads rvar outside rsqrt: drawn from the after program's own
    # inputs, rvar would be negative where the program before had it >= 0.
    ("batchnorm.leir", {"id": "cache_read", "args": {"block": "Y", "tensor": "rvar", "scope": "l"}}),
    ("batchnorm.leir", {"id": "cache_read", "args": {"block": "Y", "tensor": "beta", "scope": "l"}}),
    # The expansion reads gamma before rmean: another draw order.
    ("conv_bn_relu.leir", {"id": "expand_factorization", "args": {"block": "Y"}}),
])
def test_equivalence_feeds_both_programs_the_inputs_of_the_program_before(workload, step):
    from leir.tools.dataset.build import _equivalence, _State
    from leir.tools.dataset.variants import strip_comments
    from leir.bridge.document import load_leir, read_text
    from leir.semantics import analyze
    from leir.transforms import apply, step_from_json, verify

    before = strip_comments(load_leir(read_text(EXAMPLES / workload)).analysis)
    after = analyze(apply(before, step_from_json(step)))
    comparisons, notes = _equivalence(_State(before, "", None), after)
    assert not notes and comparisons and all(c.ok for _, c in comparisons)
    assert verify(before, after).ok  # and leir.transforms.verify agrees


def test_full_verification_builds_both_programs_with_tvm(tmp_path):
    cfg = BuildConfig(workloads=str(EXAMPLES), out=str(tmp_path / "full"), variants=0, steps=1, budget=2,
                      only=["softmax.leir"], cache_dir=str(tmp_path / "cache"), verify="full")
    build(cfg, progress=False)
    samples = list(read_samples(tmp_path / "full"))
    assert len(samples) == 2
    for s in samples:
        records.validate(s)
        assert s["verification"]["method"] == "tvm" and s["verified"], s["verification"]


def test_progress_counts_states_and_drops_those_of_a_trajectory_that_ends_early():
    import io

    from leir.tools.dataset.build import _Progress

    stream = io.StringIO()  # not a terminal: a line per finished trajectory
    # 3 trajectories of at most 4 steps: one finished, one resumed after 2 states.
    bar = _Progress(3, 1, 4, 4 + 2, stream=stream)
    assert (bar.total, bar.done) == (12, 6)
    bar.state(10, 9)
    bar.trajectory(1, 10, 9)  # ended after 3 of its 4 states
    assert (bar.total, bar.done) == (11, 7)
    line = stream.getvalue()
    assert line.startswith("leir dataset: 2/3 trajectories, 7/11 states, 10 samples (9 verified), ")
    assert line.rstrip().endswith(" s") and "ETA" in line



def test_a_kernel_that_fails_the_reference_check_is_a_sample_not_verified(tmp_path):
    # A wrong kernel, as the engine reports it (no latency, the comparison
    # that failed, not cached): the sample says so, under the method that
    # found it, and the trajectory goes on from a verified candidate.
    from concurrent.futures import Future

    from leir.measure import MeasurementEngine
    from leir.measure.measurement import failure
    from leir.bridge.run import Comparison

    class OneWrong:
        def __init__(self, engine):
            self.engine, self.workers, self.calls = engine, engine.workers, 0

        def submit(self, analysis, **kwargs):
            self.calls += 1
            if self.calls != 3:  # the first is the start program
                return self.engine.submit(analysis, **kwargs)
            future = Future()
            future.set_result(failure("wrong result: Y differs from the reference program's NumPy evaluation",
                                      target="llvm", device="cpu",
                                      comparisons={"Y": Comparison(False, 2.0, 1.5, 0.3, "", 7)}))
            return future

    cfg = BuildConfig(workloads=str(EXAMPLES), out=str(tmp_path / "out"), variants=0, steps=2, budget=3,
                      only=["softmax.leir"], cache_dir=str(tmp_path / "cache"))
    with MeasurementEngine("llvm", workers=2, cache=str(tmp_path / "cache"), repeat=3, min_run_ms=2.0) as engine:
        build(cfg, engine=OneWrong(engine), progress=False)
    samples = list(read_samples(tmp_path / "out"))
    wrong = [s for s in samples if not s["verified"]]
    assert len(wrong) == 1 and len(samples) > 3
    s = wrong[0]
    assert s["verification"]["method"] == "tvm-vs-start" and s["verification"]["max_abs_err"] == 2.0
    assert s["error"].startswith("wrong result") and s["latency_after_ms"] is None and not s["chosen"]
    assert {x["step_index"] for x in samples} == {0, 1}
