"""The measurement cache: structural keys (computed without TVM), the SQLite
database, its location, several processes writing at once, and schema
versions."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from leir.bridge.document import load_leir
from leir.measure import cache as C
from leir.measure.cache import CacheError, MeasurementCache, cache_directory
from leir.measure.key import measurement_key, structural_text, workload_key
from leir.measure.measurement import Measurement, VendorResult, failure
from leir.bridge.run import Comparison

REPO_ROOT = Path(__file__).resolve().parent.parent

MATMUL = """
# C = X @ W
L^{64}_{i}
  L^{48}_{j}
    L^{32}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
"""

MATMUL_RELAID = """in X: f32[64,32]
L^{64}_{i} L^{48}_{j} L^{32}_{k} [ C_{i,j} = C_{i,j} + X_{i,k}*W_{k,j};  # accumulate
];
"""


def analysis_of(text: str):
    doc = load_leir(text)
    assert doc.ok, [d.message for d in doc.diagnostics]
    return doc.analysis


def key_of(text: str, target="llvm", device="cpu0", toolchain="tvm 0.27") -> str:
    return measurement_key(analysis_of(text), target, device, toolchain)


def a_measurement(key: str, median=1.0, runs=7) -> Measurement:
    ok = Comparison(True, 1e-6, 1e-5, 1e-12, "elementwise", 0)
    return Measurement(median, median * 0.9, median * 1.2, runs, 0.3, "llvm", "cpu0", True, {"C": ok}, False, 0.5,
                       None, mean_ms=median, number=10, results_ms=(median,) * runs,
                       vendor=VendorResult(0.5, 0.4, 0.6, 7, 100, "np.einsum(...)", "blas-contraction", "numpy"),
                       measured_at=1_800_000_000.0, key=key)


def store(cache: MeasurementCache, m: Measurement, trace=None) -> None:
    cache.store(m, program=MATMUL, toolchain="tvm 0.27", shapes={"C": ("f32", (64, 48))}, trace=trace)


# ------------------------------------------------------------ keys


def test_key_ignores_comments_layout_and_declarations_that_restate_inference():
    assert key_of(MATMUL) == key_of(MATMUL_RELAID)


def test_key_changes_with_shapes_dtypes_target_device_and_toolchain():
    base = key_of(MATMUL)
    assert key_of(MATMUL.replace("{32}", "{16}")) != base
    assert key_of("in X: f16[64,32]\n" + MATMUL) != base
    assert key_of(MATMUL, target="cuda") != base
    assert key_of(MATMUL, device="cpu1") != base
    assert key_of(MATMUL, toolchain="tvm 0.28") != base


def test_key_is_strict_about_names():
    # A renamed loop variable is another key: a miss costs a measurement,
    # never the latency of a different program.
    assert key_of(MATMUL.replace("_{k}", "_{r}").replace(",k}", ",r}").replace("{k,", "{r,")) != key_of(MATMUL)


def test_structural_text_round_trips_through_the_worker_form():
    # The worker re-parses the fully declared program: it must be the same workload.
    from leir.printer import print_program

    a = analysis_of("L^{8}_{i} [ M_{i} = X_{i}*2; Y_{i} = M_{i} + Z_{i}; ];")
    b = analysis_of(print_program(a.complete_program()))
    assert structural_text(a) == structural_text(b)


def test_vendor_key_does_not_depend_on_target_or_toolchain():
    a = analysis_of(MATMUL)
    assert workload_key(a, "cpu0") == workload_key(analysis_of(MATMUL_RELAID), "cpu0") != workload_key(a, "cpu1")


def test_computing_a_key_and_reading_the_cache_do_not_import_tvm(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        from leir.bridge.document import load_leir
        from leir.measure import MeasurementEngine, measurement_key
        from leir.measure.cache import MeasurementCache
        analysis = load_leir({MATMUL!r}).analysis
        key = measurement_key(analysis, "llvm", "cpu0")
        MeasurementCache({str(tmp_path)!r}).lookup(key)
        engine = MeasurementEngine("llvm", cache={str(tmp_path)!r})
        engine.close()
        assert "tvm" not in sys.modules, "tvm was imported"
    """)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT, timeout=60)


# ------------------------------------------------------------ storing and finding


def test_a_stored_measurement_is_found_with_everything_it_had(tmp_path):
    with MeasurementCache(tmp_path) as cache:
        m = a_measurement("k1")
        store(cache, m, trace=[{"id": "split", "args": {"loop": "i", "factor": 8}}])
        hit = cache.lookup("k1")
        assert hit.cached and not m.cached
        for field in ("median_ms", "min_ms", "max_ms", "runs", "spread", "target", "device", "verified",
                      "comparisons", "vendor_ms", "vendor", "results_ms", "number", "measured_at", "key"):
            assert getattr(hit, field) == getattr(m, field), field
        record = cache.record("k1")
        assert record["program"] == MATMUL and record["toolchain"] == "tvm 0.27"
        assert '"split"' in record["trace"] and record["measured_at"] == m.measured_at


def test_a_miss_is_none_and_fewer_runs_than_asked_is_a_miss(tmp_path):
    with MeasurementCache(tmp_path) as cache:
        store(cache, a_measurement("k1", runs=5))
        assert cache.lookup("other") is None
        assert cache.lookup("k1", min_runs=5) is not None
        assert cache.lookup("k1", min_runs=20) is None


def test_failures_are_not_stored(tmp_path):
    with MeasurementCache(tmp_path) as cache, pytest.raises(ValueError):
        store(cache, failure("timed out after 60 s while timing", target="llvm", device="cpu0", key="k"))


def test_measurements_persist_across_connections(tmp_path):
    with MeasurementCache(tmp_path) as cache:
        store(cache, a_measurement("k1", median=2.5))
    with MeasurementCache(tmp_path) as cache:
        assert cache.lookup("k1").median_ms == 2.5 and cache.count() == 1


def test_vendor_references_are_remembered_even_when_there_is_none(tmp_path):
    with MeasurementCache(tmp_path) as cache:
        assert cache.vendor_lookup("w") == (False, None)
        cache.vendor_store("w", None)
        assert cache.vendor_lookup("w") == (True, None)
        v = VendorResult(0.5, 0.4, 0.6, 7, 100, "np.einsum(...)", "blas-contraction", "numpy")
        cache.vendor_store("w2", v)
        assert cache.vendor_lookup("w2") == (True, v)


def test_several_processes_write_at_once(tmp_path):
    writer = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_measure_cache import a_measurement, store
        from leir.measure.cache import MeasurementCache
        cache = MeasurementCache({str(tmp_path)!r})
        for i in range(40):
            store(cache, a_measurement(f"{{sys.argv[1]}}-{{i}}", median=float(i + 1)))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", writer, name], cwd=REPO_ROOT) for name in ("a", "b", "c")]
    for p in procs:
        assert p.wait(timeout=60) == 0
    with MeasurementCache(tmp_path) as cache:
        assert cache.count() == 120
        assert cache.lookup("b-39").median_ms == 40.0
        mode = cache._conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


# ------------------------------------------------------------ location


def test_the_directory_is_the_argument_then_leir_cache_dir_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LEIR_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_directory() == tmp_path / "home" / ".cache" / "leir-lsp"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_directory() == tmp_path / "xdg" / "leir-lsp"
    monkeypatch.setenv("LEIR_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_directory() == tmp_path / "mine"
    assert cache_directory(tmp_path / "arg") == tmp_path / "arg"
    assert MeasurementCache().path == tmp_path / "mine" / "measurements.sqlite"


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("LEIR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG spec says to ignore it
    assert cache_directory() == tmp_path / ".cache" / "leir-lsp"


# ------------------------------------------------------------ schema versions


def test_a_new_database_records_its_schema_version(tmp_path):
    MeasurementCache(tmp_path).close()
    conn = sqlite3.connect(tmp_path / "measurements.sqlite")
    assert conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone() == (str(C.SCHEMA_VERSION),)


def test_migrating_the_current_version_changes_nothing(tmp_path):
    with MeasurementCache(tmp_path) as cache:
        store(cache, a_measurement("k1"))
    conn = sqlite3.connect(tmp_path / "measurements.sqlite", isolation_level=None)
    C.migrate(conn, C.SCHEMA_VERSION)
    assert conn.execute("SELECT COUNT(*) FROM measurements").fetchone() == (1,)
    conn.close()


def test_an_older_version_is_migrated_step_by_step(tmp_path, monkeypatch):
    # What a version 3 would do: this release's database is the "old" one.
    def add_column(conn):
        conn.execute("ALTER TABLE measurements ADD COLUMN energy_j REAL")

    MeasurementCache(tmp_path).close()
    monkeypatch.setattr(C, "SCHEMA_VERSION", 3)
    monkeypatch.setitem(C.MIGRATIONS, 2, add_column)
    MeasurementCache(tmp_path).close()
    conn = sqlite3.connect(tmp_path / "measurements.sqlite")
    assert conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone() == ("3",)
    assert "energy_j" in [r[1] for r in conn.execute("PRAGMA table_info(measurements)")]


def test_a_version_1_database_keeps_its_measurements_and_gains_checked_against(tmp_path):
    # A cache written by the first release: version 1's tables, one row.
    conn = sqlite3.connect(tmp_path / "measurements.sqlite", isolation_level=None)
    for statement in C._SCHEMA_V1:
        conn.execute(statement)
    conn.execute("INSERT INTO meta (name, value) VALUES ('schema_version', '1')")
    conn.execute("INSERT INTO measurements (key, program, trace, target, device, toolchain, shapes, median_ms, min_ms,"
                 " max_ms, mean_ms, runs, number, spread, results_ms, comparisons, vendor, notes, measured_at)"
                 " VALUES ('old', 'p', NULL, 'llvm', 'cpu0', 'tvm 0.27', '{}', 2.0, 1.9, 2.2, 2.0, 3, 10, 0.15,"
                 " '[2.0, 1.9, 2.2]', '{}', NULL, '[]', 1800000000.0)")
    conn.close()
    with MeasurementCache(tmp_path) as cache:
        old = cache.lookup("old")
        assert old.median_ms == 2.0 and old.runs == 3 and old.checked_against is None
        checked = replace(a_measurement("new"), checked_against="ref-key")
        store(cache, checked)
        assert cache.lookup("new").checked_against == "ref-key"
    conn = sqlite3.connect(tmp_path / "measurements.sqlite")
    assert conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone() == ("2",)


def test_a_newer_version_is_refused_clearly(tmp_path):
    MeasurementCache(tmp_path).close()
    conn = sqlite3.connect(tmp_path / "measurements.sqlite", isolation_level=None)
    conn.execute("UPDATE meta SET value = '7' WHERE name = 'schema_version'")
    conn.close()
    with pytest.raises(CacheError, match=r"schema version 7, newer than this leir-lsp understands \(2\): upgrade"):
        MeasurementCache(tmp_path)


def test_a_file_that_is_not_a_measurement_cache_is_refused(tmp_path):
    (tmp_path / "measurements.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(CacheError, match="not a leir-lsp measurement database"):
        MeasurementCache(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    conn = sqlite3.connect(other / "measurements.sqlite")
    conn.execute("CREATE TABLE photos (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(CacheError, match="other tables \\(photos\\)"):
        MeasurementCache(other)

