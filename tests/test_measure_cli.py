"""``leir measure`` and ``leir bench-device``."""

from __future__ import annotations

import json

import pytest

from leir.tools.cli import main

pytestmark = pytest.mark.slow

JSON_KEYS = {"median_ms", "min_ms", "max_ms", "runs", "target", "device", "verified", "cached", "vendor_ms"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("LEIR_CACHE_DIR", str(directory))
    return directory


def run_json(capsys, *args) -> tuple[int, object]:
    status = main(list(args))
    out = capsys.readouterr().out
    return status, json.loads(out)


def test_measure_prints_json_and_the_second_run_is_cached(examples_dir, cache, capsys):
    path = str(examples_dir / "matmul.leir")
    status, first = run_json(capsys, "measure", path, "--json", "--repeat", "3")
    assert status == 0 and JSON_KEYS <= set(first)
    assert (first["verified"], first["cached"], first["runs"], first["target"], first["error"]) == (True, False, 3, "llvm", None)
    assert first["min_ms"] <= first["median_ms"] <= first["max_ms"] and first["vendor_ms"] > 0
    status, second = run_json(capsys, "measure", path, "--json", "--repeat", "3")
    assert status == 0 and second["cached"] and second["median_ms"] == first["median_ms"]
    assert (cache / "measurements.sqlite").is_file()


def test_bench_device_gives_measure_its_roofline(examples_dir, cache, capsys):
    status, peaks = run_json(capsys, "bench-device", "--quick", "--json")
    assert status == 0 and peaks["flops_per_s"] > 0 and peaks["bytes_per_s"] > 0
    assert peaks["path"] == str(cache / "device-peaks.json")
    status = main(["measure", str(examples_dir / "softmax.leir"), "--repeat", "3"])
    table = capsys.readouterr().out
    assert status == 0
    assert "of roofline" in table and "of vendor): examples/references.py:softmax" in table
    assert "verified  Y: ok" in table


def test_measure_several_files_prints_a_list(examples_dir, cache, capsys):
    files = [str(examples_dir / f) for f in ("transpose.leir", "gelu.leir")]
    status, rows = run_json(capsys, "measure", *files, "--json", "--repeat", "3")
    assert status == 0 and [r["file"] for r in rows] == files and all(r["verified"] for r in rows)


def test_a_failed_measurement_exits_1_with_the_reason(tmp_path, cache, capsys):
    path = tmp_path / "packed.leir"
    path.write_text("in X: i4[8]\nL^{8}_{i} [ Y_{i} = i32(X_{i}); ];\n")
    status = main(["measure", str(path), "--repeat", "3"])
    assert status == 1
    assert "error   cannot run: X is i4" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["measure", "missing.leir"], "missing.leir: no such file"),
    (["measure", "{examples}/matmul.leir", "--rpc", "nohost"], "--rpc nohost: expected HOST:PORT:KEY"),
    (["measure", "{examples}/matmul.leir", "--repeat", "0"], "repeat 0: at least one timed run is needed"),
])
def test_mistakes_are_one_line(args, message, examples_dir, cache, capsys):
    status = main([a.replace("{examples}", str(examples_dir)) for a in args])
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_newer_cache_is_refused_in_one_line(examples_dir, cache, capsys):
    import sqlite3

    from leir.measure.cache import MeasurementCache

    MeasurementCache(cache).close()
    conn = sqlite3.connect(cache / "measurements.sqlite", isolation_level=None)
    conn.execute("UPDATE meta SET value = '99' WHERE name = 'schema_version'")
    conn.close()
    status = main(["measure", str(examples_dir / "matmul.leir")])
    err = capsys.readouterr().err
    assert status == 2 and "schema version 99, newer than this leir-lsp understands" in err


def test_the_progress_bar_redraws_one_line_and_clears_it():
    import io

    from leir.measure.engine import Progress
    from leir.measure.report import ProgressBar

    out = io.StringIO()
    bar = ProgressBar(out)
    bar(Progress(0, 2, "a.leir", "building"))
    bar(Progress(1, 2, "a.leir", "done"))
    bar.clear()
    text = out.getvalue()
    assert "\n" not in text
    assert "[..........] 0/2 a.leir: building".replace("..........", "." * 20) in text
    assert "[" + "#" * 10 + "." * 10 + "] 1/2 a.leir: done" in text
    assert text.endswith("\r\x1b[K")
