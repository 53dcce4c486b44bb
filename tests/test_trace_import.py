"""Expert trajectories (issue 14): a MetaSchedule-style trace translated into
catalogue steps (leir/tools/trace_import.py). The traces here are recorded
by TVM's own schedule (``debug_mask="all"``) on the lowered program, with
the instructions MetaSchedule's CPU rules and postprocessors emit; a real
tuning run is bench/suite.py's (minutes)."""

from __future__ import annotations

import pytest

from leir import transforms
from leir.bridge.document import load_leir
from leir.printer import print_program
from leir.tools.trace_import import import_trace

MATMUL = """\
L^{64}_{i}
  L^{64}_{j}
    L^{32}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
"""


def schedule(text: str):
    import tvm
    from tvm import s_tir

    from leir.bridge.lower import lower

    a = load_leir(text).analysis
    return a, s_tir.Schedule(tvm.IRModule({"main": lower(a)}), debug_mask="all")


def test_a_tiled_trace_becomes_catalogue_steps_that_verify():
    a, sch = schedule(MATMUL)
    b = sch.get_sblock("C")
    i, j, k = sch.get_loops(b)
    i0, i1, i2 = sch.split(i, [4, 16, 1])  # a unit loop: no LEIR loop
    j0, j1 = sch.split(j, [4, 16])
    k0, k1 = sch.split(k, [4, 8])
    sch.reorder(i0, j0, k0, i1, k1, i2, j1)
    c = sch.cache_write(b, 0, "global")
    sch.reverse_compute_at(c, j0)
    f = sch.fuse(i0, j0)
    sch.parallel(f)
    sch.vectorize(j1)
    sch.annotate(f, "pragma_auto_unroll_max_step", 16)
    sch.decompose_reduction(b, k0)

    imported = import_trace(a, sch.trace)
    assert imported.complete, imported.stopped
    ids = [s.id for s in imported.steps]
    # The reorder of seven loops is adjacent swaps, as many as it takes.
    collapsed = [x for n, x in enumerate(ids) if x != "reorder" or ids[n - 1] != "reorder"]
    assert collapsed == ["split", "split", "split", "reorder", "cache_write", "reverse_compute_at", "fuse",
                         "parallelize", "vectorize", "decompose_reduction"]
    assert imported.steps[0].args["factors"] == [4, 16]  # [4, 16, 1] without its unit loop
    assert len(imported.lost) == 1 and "pragma_auto_unroll_max_step=16" in imported.lost[0]
    # The steps replay on a fresh parse, and the end program computes the same.
    assert print_program(transforms.replay(a.program, imported.steps)) == print_program(imported.program)
    assert transforms.verify(a, load_leir(print_program(imported.program)).analysis).ok
    text = print_program(imported.program)
    assert "P^{16}" in text and "V^{16}" in text and "C_global" in text


def test_a_trace_for_another_program_stops_where_it_no_longer_fits():
    a, sch = schedule(MATMUL)
    b = sch.get_sblock("C")
    i, j, k = sch.get_loops(b)
    sch.split(i, [8, 8])
    sch.parallel(sch.get_loops(b)[2])  # j: fine
    other = load_leir(MATMUL.replace("L^{64}_{i}", "L^{60}_{i}").replace("L^{64}_{j}", "L^{60}_{j}")).analysis
    imported = import_trace(other, sch.trace)
    assert not imported.complete and "not a proper divisor of 60" in imported.stopped
    assert imported.steps == []


def test_an_instruction_without_a_catalogue_step_is_named_and_skipped():
    a, sch = schedule(MATMUL)
    b = sch.get_sblock("C")
    i, j, k = sch.get_loops(b)
    sch.annotate(b, "my_hint", 1)
    sch.parallel(i)
    sch.add_unit_loop(b)
    imported = import_trace(a, sch.trace)
    assert imported.complete
    assert [s.id for s in imported.steps] == ["parallelize"]
    assert imported.lost == ["Annotate my_hint=1: no catalogue step (an annotation for TVM's code generator)",
                             "AddUnitLoop: no catalogue step"]


def test_import_refuses_a_program_with_errors():
    from leir.tools.trace_import import TraceImportError

    _, sch = schedule(MATMUL)
    with pytest.raises(TraceImportError):
        import_trace(load_leir("L^{4}_{i} [ Y_{i} = Y_{i+7}; ];").analysis, sch.trace)  # read before written


def test_import_trace_cli_translates_a_database_and_writes_a_replayable_trace(tmp_path):
    import json
    import subprocess
    import sys

    import tvm
    from tvm.s_tir import meta_schedule as ms

    from leir.bridge.lower import lower

    a, sch = schedule(MATMUL)
    b = sch.get_sblock("C")
    i, j, k = sch.get_loops(b)
    sch.split(j, [4, 16])
    sch.parallel(i)
    (tmp_path / "db").mkdir()
    db = ms.database.JSONDatabase(work_dir=str(tmp_path / "db"))
    workload = db.commit_workload(tvm.IRModule({"main": lower(a)}))
    db.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, [tvm.runtime.const(0.002, "float32")]))
    (tmp_path / "mm.leir").write_text(MATMUL)
    out = subprocess.run([sys.executable, "-m", "leir.tools.cli", "import-trace", str(tmp_path / "mm.leir"),
                          "--database", str(tmp_path / "db"), "--json", "--write", str(tmp_path / "trace.json")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert (summary["records"], summary["complete"]) == (1, 1)
    assert summary["best"]["verified"] and summary["best"]["metaschedule_ms"] == pytest.approx(2.0, rel=1e-3)
    assert [s["id"] for s in summary["best"]["steps"]] == ["split", "parallelize"]
    replayed = subprocess.run([sys.executable, "-m", "leir.tools.cli", "replay", str(tmp_path / "mm.leir"),
                               str(tmp_path / "trace.json")], capture_output=True, text=True, timeout=300)
    assert replayed.returncode == 0 and "P^{64}_{i}" in replayed.stdout and "L^{16}_{j_1}" in replayed.stdout
    # A directory without a database is a one-line error, not a traceback.
    bad = subprocess.run([sys.executable, "-m", "leir.tools.cli", "import-trace", str(tmp_path / "mm.leir"),
                          "--database", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "no MetaSchedule database" in bad.stderr
