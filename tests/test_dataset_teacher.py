"""Teacher trajectories in the dataset builder (issue 14, item 4): the steps
of the best plans of ``leir.tools.plans`` and of a MetaSchedule database's
translated traces, recorded as samples with ``policy: "teacher"``.

One real build (a 64x64x32 matmul and the softmax example, no variants,
one step of walk, one plan teacher each, and a tiny MetaSchedule database
for the matmul made with TVM's own schedule as tests/test_trace_import.py
makes them) is shared by the tests; each sample is measured through the
measurement engine as the builder's other samples are.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from test_dataset_build import build_killed_after
from test_trace_import import MATMUL, schedule

from leir.tools.dataset import records
from leir.tools.dataset.build import (
    CONFIG,
    PROGRESS,
    SAMPLES,
    TEACHERS,
    VARIANTS,
    BuildConfig,
    DatasetError,
    build,
    read_samples,
)

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MS_FAST, MS_STOPS, MS_SAME, MS_OTHER = 0.002, 0.003, 0.004, 0.001


def _database(directory: Path) -> None:
    """Four tuning records: one that translates (with an annotation LEIR has
    no step for), one whose split does not divide the loop (the translation
    stops), a slower one reaching the first one's program, and one for
    another program."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from leir.bridge.lower import lower

    directory.mkdir()
    db = ms.database.JSONDatabase(work_dir=str(directory))
    a, _ = schedule(MATMUL)
    workload = db.commit_workload(tvm.IRModule({"main": lower(a)}))

    def record(sch, seconds, wl=workload):
        db.commit_tuning_record(ms.database.TuningRecord(sch.trace, wl, [tvm.runtime.const(seconds, "float32")]))

    _, sch = schedule(MATMUL)
    i, j, _ = sch.get_loops(sch.get_sblock("C"))
    sch.split(j, [4, 16])
    sch.parallel(i)
    sch.annotate(i, "pragma_auto_unroll_max_step", 16)
    record(sch, MS_FAST)
    _, sch = schedule(MATMUL)
    i, _, _ = sch.get_loops(sch.get_sblock("C"))
    sch.split(i, [10, 7])
    record(sch, MS_STOPS)
    _, sch = schedule(MATMUL)
    i, j, _ = sch.get_loops(sch.get_sblock("C"))
    sch.parallel(i)
    sch.split(j, [4, 16])
    record(sch, MS_SAME)
    other, sch = schedule(MATMUL.replace("L^{64}_{i}", "L^{60}_{i}"))
    sch.parallel(sch.get_loops(sch.get_sblock("C"))[0])
    record(sch, MS_OTHER, db.commit_workload(tvm.IRModule({"main": lower(other)})))


def _config(tmp: Path, out: str, **kw) -> BuildConfig:
    base = dict(workloads=str(tmp / "w"), out=str(tmp / out), variants=0, steps=1, budget=2, seed=3, teachers=1,
                teacher_databases=[f"mm={tmp / 'db'}"], cache_dir=str(tmp / "cache"))
    base.update(kw)
    return BuildConfig(**base)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("teacher")
    (tmp / "w").mkdir()
    (tmp / "w" / "mm.leir").write_text(MATMUL, encoding="utf-8")
    shutil.copy(EXAMPLES / "softmax.leir", tmp / "w" / "softmax.leir")
    _database(tmp / "db")
    summary = build(_config(tmp, "out"), progress=False)
    return tmp, summary, list(read_samples(tmp / "out"))


def _trajectories(samples) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for s in samples:
        if s["policy"] == "teacher" or s["trajectory"].rsplit("/", 1)[1].startswith(("plan", "db")):
            out.setdefault(s["trajectory"], []).append(s)
    return out


def _starts(tmp: Path, out: str = "out") -> dict[str, str]:
    rows = [json.loads(line) for line in (tmp / out / VARIANTS).read_text().splitlines()]
    return {f"{r['workload']}/{r['name']}": r["program"] for r in rows}


def test_teacher_trajectories_are_chains_of_chosen_verified_samples(built):
    tmp, summary, samples = built
    teachers = _trajectories(samples)
    assert set(teachers) == {"mm.leir/orig/plan0", "mm.leir/orig/db0", "softmax.leir/orig/plan0"}
    starts = _starts(tmp)
    for tid, group in teachers.items():
        assert [s["step_index"] for s in group] == list(range(len(group)))
        assert group[0]["before"] == starts[tid.rsplit("/", 1)[0]]
        for s in group:
            records.validate(s)
            assert set(s) == set(records.FIELDS)
            assert s["policy"] == "teacher" and s["chosen"] and s["verified"], (tid, s["error"])
            assert s["verification"]["method"] == "tvm-vs-start" and s["runs"] == 3
            assert s["before"] != s["after"]
            assert s["reasoning_facts"]["teacher"]["of"] == len(group)
            assert f"of {len(group)} of a" in s["reasoning"]
        for a, b in zip(group, group[1:]):
            # The program after step k is the program before step k + 1, measured once.
            assert b["before"] == a["after"] and b["latency_before_ms"] == a["latency_after_ms"]
    # The walks are there too, and keep their own policies.
    walks = [s for s in samples if s["trajectory"].endswith("/t0")]
    assert walks and {s["policy"] for s in walks} <= {"exploit", "explore", None}
    assert summary.teachers["plan_trajectories"] == 2 and summary.teachers["database_trajectories"] == 1
    assert summary.teachers["samples"] == sum(len(g) for g in teachers.values())
    assert summary.samples_written == len(samples)


def test_the_plan_teacher_follows_the_fastest_screened_plan_step_by_step(built):
    tmp, _, samples = built
    plans = json.loads((tmp / "out" / TEACHERS).read_text())["mm.leir/orig"]["plans"]
    # max(budget, teachers) = 2 plan end programs screened (measured, verified), the faster followed.
    assert plans["screened"] == 2 and plans["verified"] == 2 and len(plans["followed"]) == 1
    followed = plans["followed"][0]
    group = _trajectories(samples)["mm.leir/orig/plan0"]
    assert [s["step"] for s in group] == followed["steps"]
    assert len(group) >= 8 and {"split", "reorder", "parallelize", "vectorize"} <= {s["strategy"] for s in group}
    assert group[-1]["latency_after_ms"] == followed["end_ms"]  # the screening's measurement, not taken again
    assert group[0]["reasoning_facts"]["teacher"]["goal"] == "a tiled contraction"
    assert group[0]["reasoning_facts"]["teacher"]["params"] == followed["params"]


def test_every_teacher_step_replays_from_before_to_after(built):
    from leir.bridge.document import load_leir
    from leir.printer import print_program
    from leir.transforms import apply, step_from_json

    _, _, samples = built
    for group in _trajectories(samples).values():
        for s in group:
            after = apply(load_leir(s["before"]).analysis, step_from_json(s["step"]))
            assert print_program(after) == s["after"], s["id"]


def test_the_end_program_of_each_teacher_trajectory_is_verified(built):
    from leir.bridge.document import load_leir
    from leir.transforms import verify

    tmp, _, samples = built
    starts = _starts(tmp)
    for tid, group in _trajectories(samples).items():
        assert group[-1]["verified"]
        result = verify(load_leir(starts[tid.rsplit("/", 1)[0]]).analysis, load_leir(group[-1]["after"]).analysis)
        assert result.ok, (tid, result.summary())


def test_database_records_become_teacher_steps_and_what_did_not_translate_is_counted(built):
    tmp, summary, samples = built
    group = _trajectories(samples)["mm.leir/orig/db0"]
    assert [s["strategy"] for s in group] == ["split", "parallelize"]
    facts = group[0]["reasoning_facts"]["teacher"]
    assert facts["source"] == "metaschedule" and facts["metaschedule_ms"] == pytest.approx(MS_FAST * 1e3, rel=1e-3)
    assert "pragma_auto_unroll_max_step=16" in facts["lost"][0]
    assert "P^{64}_{i}" in group[-1]["after"] and "L^{16}_{j_1}" in group[-1]["after"]
    (report,) = json.loads((tmp / "out" / TEACHERS).read_text())["mm.leir/orig"]["databases"]
    assert (report["records"], report["other_programs"], report["translated"], report["stopped"]) == (3, 1, 2, 1)
    assert report["stopped_at"] == {"split: 7 is not a proper divisor of 64": 1}
    assert report["lost"] == {"Annotate pragma_auto_unroll_max_step=16": 1}
    # The slower record reaches the same program: followed once.
    assert report["same_program"] == 1 and [f["trajectory"] for f in report["followed"]] == ["mm.leir/orig/db0"]
    assert (summary.teachers["database_records"], summary.teachers["translated"], summary.teachers["stopped"]) == \
        (3, 2, 1)
    assert "1 stopped" in summary.text() and "Annotate pragma_auto_unroll_max_step=16 1" in summary.text()
    assert "translation stopped at split" in (tmp / "out" / "build.log").read_text()


def test_stats_and_export_count_samples_per_policy(built, tmp_path):
    from leir.tools.dataset.export import export
    from leir.tools.dataset.stats import compute, format_stats

    tmp, _, samples = built
    shutil.copy(tmp / "out" / SAMPLES, tmp_path / SAMPLES)
    shutil.copy(tmp / "out" / TEACHERS, tmp_path / TEACHERS)
    stats = compute(tmp_path, tokens=False)
    n_teacher = sum(s["policy"] == "teacher" for s in samples)
    teacher = stats["per_policy"]["teacher"]
    assert teacher["samples"] == n_teacher and teacher["trajectories"] == 3 and teacher["verified"] == n_teacher
    assert sum(row["samples"] for row in stats["per_policy"].values()) == len(samples)
    db = stats["teachers"]["databases"][str(tmp / "db")]
    assert (db["records"], db["translated"], db["stopped"], db["followed"]) == (3, 2, 1, 1)
    plans = stats["teachers"]["plans"]
    assert plans["start_programs"] == 2 and plans["followed"] == 2 and plans["screened"] >= plans["verified"] >= 2
    text = format_stats(stats)
    assert "per policy" in text and "teacher database" in text and "Annotate" in text
    summary = export(tmp_path, parquet=False)
    kept = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert summary.policies == dict(Counter(s["policy"] or "none" for s in kept)) and summary.policies["teacher"] > 0
    assert json.loads((tmp_path / "splits.json").read_text())["policies"] == summary.policies


def test_validation_rejects_an_unknown_policy_and_a_policy_without_a_choice(built):
    _, _, samples = built
    teacher = next(s for s in samples if s["policy"] == "teacher")
    records.validate(teacher)
    with pytest.raises(records.RecordError, match="policy"):
        records.validate(dict(teacher, policy="greedy"))
    with pytest.raises(records.RecordError, match="chosen"):
        records.validate(dict(teacher, chosen=False))
    with pytest.raises(records.RecordError, match="chosen"):
        records.validate(dict(teacher, policy=None))


def _path(samples) -> list[tuple]:
    """What a build decided, without the figures measured (a program measured
    twice at once in a cold build keeps the later figure in the cache)."""
    return [(s["id"], s["trajectory"], s["before"], json.dumps(s["step"]), s["after"], s["policy"], s["verified"])
            for s in samples]


def test_a_second_build_adds_nothing_and_the_same_seed_and_cache_give_the_same_samples(built):
    tmp, _, samples = built
    again = build(_config(tmp, "out"), progress=False)
    assert again.samples_written == 0 and list(read_samples(tmp / "out")) == samples
    warm = build(_config(tmp, "again"), progress=False)
    assert warm.cache_hits == warm.measurements
    assert _path(read_samples(tmp / "again")) == _path(samples)  # the same order, too
    build(_config(tmp, "again2"), progress=False)
    assert list(read_samples(tmp / "again2")) == list(read_samples(tmp / "again"))


# Killed in the matmul's plan trajectory (its plans were screened and
# recorded in teachers.json: the resumed build follows those), and in its
# database trajectory (the plan trajectories committed).
@pytest.mark.parametrize("where", ["mm.leir/orig/plan0", "mm.leir/orig/db0"])
def test_a_build_killed_in_a_teacher_trajectory_resumes_without_losing_or_repeating_a_sample(
        built, monkeypatch, where):
    tmp, _, samples = built
    # Killed a few samples into that trajectory (its length depends on the
    # plans: a reorder of a run is one step since 2026-12-07).
    inside = [k for k, s in enumerate(samples) if s["trajectory"] == where]
    assert len(inside) >= 2, f"{where}: {len(inside)} samples, too few to be killed inside"
    kill_after = inside[0] + min(4, len(inside) - 1)
    out = f"killed{kill_after}"
    build_killed_after(_config(tmp, out), kill_after, monkeypatch)
    committed = json.loads((tmp / out / PROGRESS).read_text())
    assert where not in committed["done"]
    assert "mm.leir/orig/plan0" not in committed["done"] or where.endswith("db0")
    assert "plans" in json.loads((tmp / out / TEACHERS).read_text())["mm.leir/orig"]
    kept = (tmp / out / SAMPLES).read_bytes()[: committed["bytes"]].count(b"\n")
    summary = build(_config(tmp, out), progress=False)
    resumed = list(read_samples(tmp / out))
    assert Counter(s["id"] for s in resumed) == Counter(s["id"] for s in samples)
    assert sorted(_path(resumed)) == sorted(_path(samples))
    assert summary.samples_written == len(samples) - kept


def test_resuming_with_other_teacher_settings_is_refused(built):
    tmp, _, _ = built
    with pytest.raises(DatasetError, match=r"other settings \(teachers\)"):
        build(_config(tmp, "out", teachers=2), progress=False)
    with pytest.raises(DatasetError, match=r"other settings \(teacher_databases\)"):
        build(_config(tmp, "out", teacher_databases=[]), progress=False)


def test_a_build_made_before_the_teacher_options_resumes(built, tmp_path):
    # Its config.json has no teachers or teacher_databases: the defaults.
    tmp, _, _ = built
    cfg = _config(tmp_path, "old", workloads=str(tmp / "w"), cache_dir=str(tmp / "cache"), only=["softmax.leir"],
                  teachers=0, teacher_databases=[])
    build(cfg, progress=False)
    config = json.loads((tmp_path / "old" / CONFIG).read_text())
    del config["teachers"], config["teacher_databases"]
    (tmp_path / "old" / CONFIG).write_text(json.dumps(config))
    assert build(cfg, progress=False).samples_written == 0
    assert not (tmp_path / "old" / TEACHERS).exists()


def test_user_mistakes_in_teacher_options_are_one_line_errors(built, tmp_path):
    tmp, _, _ = built
    (tmp_path / "empty").mkdir()
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "database_workload.json").write_text("not json{")
    (tmp_path / "damaged" / "database_tuning_record.json").write_text("[1")
    for databases, message in [
        (["mm"], "expected STEM=DIR"),
        ([f"={tmp / 'db'}"], "expected STEM=DIR"),
        ([f"mm={tmp_path / 'missing'}"], "is not a directory"),
        ([f"mm={tmp_path / 'empty'}"], "holds no MetaSchedule database"),
        ([f"conv={tmp / 'db'}"], r"no workload conv.leir in .*\(its workloads: mm, softmax\)"),
        ([f"mm={tmp_path / 'damaged'}"], "MetaSchedule cannot read this database"),
    ]:
        with pytest.raises(DatasetError, match=message):
            build(_config(tmp_path, "x", workloads=str(tmp / "w"), teacher_databases=databases), progress=False)
    with pytest.raises(DatasetError, match="--teachers must be at least 0"):
        build(_config(tmp_path, "x", workloads=str(tmp / "w"), teachers=-1, teacher_databases=[]), progress=False)
    # From the command line: the message, no traceback.
    run = subprocess.run([sys.executable, "-m", "leir.tools.cli", "dataset", "build", "--workloads", str(tmp / "w"),
                          "--out", str(tmp_path / "cli"), "--teacher-database", f"conv={tmp / 'db'}"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "Traceback" not in run.stderr and "no workload conv.leir" in run.stderr
