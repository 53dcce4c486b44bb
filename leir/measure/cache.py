"""The measurement database: one SQLite file per user cache directory.

Where: the directory passed in, else ``$LEIR_CACHE_DIR``, else
``$XDG_CACHE_HOME/leir-lsp``, else ``~/.cache/leir-lsp``; the file is
``measurements.sqlite`` there (``device-peaks.json``, the roofline figures,
sits next to it).

Several processes (editor sessions, an optimizer, the CLI) may read and write
it at once: the database is in WAL mode (readers never wait for a writer),
every connection waits up to ``BUSY_TIMEOUT_S`` for a lock instead of
failing, and each write is one ``BEGIN IMMEDIATE`` transaction.

Only successful, verified measurements are stored. A failure may come from
the moment (a loaded machine timing out, a device that went away) and is
measured again next time.

Schema versions: the ``meta`` table holds ``schema_version``. Opening a file
of an older version runs ``MIGRATIONS`` in order; a newer version is
refused, since this release cannot know what it would break. Version 2
added ``checked_against`` (the reference program a kernel was checked
against, ``Measurement.checked_against``); rows of version 1 have none.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable

from leir.errors import LeirError
from leir.measure.measurement import Measurement, VendorResult
from leir.bridge.comparison import Comparison

SCHEMA_VERSION = 2
DATABASE_NAME = "measurements.sqlite"
#: How long a writer waits for another process's transaction before failing.
BUSY_TIMEOUT_S = 10.0


def _add_checked_against(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE measurements ADD COLUMN checked_against TEXT")  # key.reference_key, or NULL


#: ``MIGRATIONS[v]`` upgrades a version-``v`` database to ``v + 1`` inside a
#: transaction. A new database is created at version 1 and migrated.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _add_checked_against}

#: One statement each: ``executescript`` would commit the transaction they run in.
_SCHEMA_V1 = ("""
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
)""", """
CREATE TABLE IF NOT EXISTS measurements (
    key TEXT PRIMARY KEY,          -- key.measurement_key: structural text, target, device, toolchain
    program TEXT NOT NULL,         -- canonical LEIR text of the program
    trace TEXT,                    -- JSON list of the steps that produced it, or NULL
    target TEXT NOT NULL,
    device TEXT NOT NULL,
    toolchain TEXT NOT NULL,
    shapes TEXT NOT NULL,          -- JSON {tensor: [dtype, [dims]]}
    median_ms REAL NOT NULL,
    min_ms REAL NOT NULL,
    max_ms REAL NOT NULL,
    mean_ms REAL NOT NULL,
    runs INTEGER NOT NULL,
    number INTEGER NOT NULL,
    spread REAL NOT NULL,
    results_ms TEXT NOT NULL,      -- JSON list, one per run
    comparisons TEXT NOT NULL,     -- JSON {output: Comparison fields}
    vendor TEXT,                   -- JSON VendorResult, or NULL
    notes TEXT NOT NULL,           -- JSON list
    measured_at REAL NOT NULL      -- Unix time
)""", """
CREATE TABLE IF NOT EXISTS vendor (
    key TEXT PRIMARY KEY,          -- key.workload_key
    result TEXT,                   -- JSON VendorResult, or NULL: there is no vendor reference
    measured_at REAL NOT NULL
)""")


class CacheError(LeirError):
    """The measurement cache cannot be used (newer schema, not a cache, unwritable)."""


def cache_directory(directory: str | os.PathLike | None = None) -> Path:
    """The cache directory: the argument, ``$LEIR_CACHE_DIR``,
    ``$XDG_CACHE_HOME/leir-lsp`` or ``~/.cache/leir-lsp``."""
    if directory is not None:
        return Path(directory)
    if os.environ.get("LEIR_CACHE_DIR"):
        return Path(os.environ["LEIR_CACHE_DIR"])
    from leir.files import user_cache_home

    return user_cache_home() / "leir-lsp"


class MeasurementCache:
    """Measurements by key (``key.measurement_key``), in SQLite.

    Thread-safe: one connection per cache object, used under a lock."""

    def __init__(self, directory: str | os.PathLike | None = None):
        self.directory = cache_directory(directory)
        self.path = self.directory / DATABASE_NAME
        self._lock = threading.Lock()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                         check_same_thread=False)
        except (OSError, sqlite3.Error) as e:
            raise CacheError(f"measurement cache {self.path}: cannot open ({e})") from None
        try:
            self._open()
        except sqlite3.DatabaseError as e:
            self._conn.close()
            raise CacheError(f"measurement cache {self.path}: not a leir-lsp measurement database ({e}); "
                             f"move it away or choose another cache directory (LEIR_CACHE_DIR)") from None
        except CacheError:
            self._conn.close()
            raise

    # ------------------------------------------------------------ opening

    def _open(self) -> None:
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable at checkpoints, never corrupt
        found = self._schema_version()
        if found is None:
            self._create()
        else:
            migrate(conn, found, self.path)

    def _schema_version(self) -> int | None:
        tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" not in tables:
            if tables:
                raise CacheError(f"measurement cache {self.path}: an SQLite database with other tables "
                                 f"({', '.join(sorted(tables))}), not a leir-lsp measurement cache")
            return None
        row = self._conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        if row is None or not str(row[0]).isdigit():
            raise CacheError(f"measurement cache {self.path}: no schema version in its meta table")
        return int(row[0])

    def _create(self) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA_V1:
                conn.execute(statement)
            # Another process may have created it first: keep its version.
            # The tables are version 1's; the migrations bring them up to date.
            conn.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('schema_version', '1')")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        migrate(conn, self._schema_version() or SCHEMA_VERSION, self.path)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "MeasurementCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ measurements

    def lookup(self, key: str, min_runs: int = 1) -> Measurement | None:
        """The stored measurement of ``key`` with at least ``min_runs`` runs, as
        a ``cached`` Measurement; None when there is none."""
        row = self._read(
            "SELECT target, device, median_ms, min_ms, max_ms, mean_ms, runs, number, spread, results_ms,"
            " comparisons, vendor, notes, measured_at, checked_against FROM measurements WHERE key = ? AND runs >= ?",
            (key, min_runs))
        if row is None:
            return None
        (target, device, median, low, high, mean, runs, number, spread, results, comparisons, vendor, notes,
         measured_at, checked_against) = row
        vendor_result = VendorResult.from_json(json.loads(vendor)) if vendor else None
        return Measurement(
            median, low, high, runs, spread, target, device, True,
            {name: Comparison(**c) for name, c in json.loads(comparisons).items()},
            True, vendor_result.median_ms if vendor_result else None, None,
            mean_ms=mean, number=number, results_ms=tuple(json.loads(results)), vendor=vendor_result,
            measured_at=measured_at, key=key, notes=tuple(json.loads(notes)), checked_against=checked_against,
        )

    def store(self, m: Measurement, *, program: str, toolchain: str, shapes: dict[str, tuple[str, tuple[int, ...]]],
              trace: list | None = None) -> None:
        """Keep a successful measurement (a failure is not stored)."""
        if not m.ok or not m.verified or m.median_ms is None:
            raise ValueError("only verified measurements are stored")
        row = (
            m.key, program, None if trace is None else json.dumps(trace), m.target, m.device, toolchain,
            json.dumps({k: [d, list(s)] for k, (d, s) in shapes.items()}),
            m.median_ms, m.min_ms, m.max_ms, m.mean_ms if m.mean_ms is not None else m.median_ms, m.runs, m.number,
            m.spread or 0.0, json.dumps(list(m.results_ms)),
            json.dumps({name: _comparison_json(c) for name, c in m.comparisons.items()}),
            None if m.vendor is None else json.dumps(m.vendor.to_json()), json.dumps(list(m.notes)),
            m.measured_at if m.measured_at is not None else time.time(), m.checked_against,
        )
        self._write("INSERT OR REPLACE INTO measurements (key, program, trace, target, device, toolchain, shapes,"
                    " median_ms, min_ms, max_ms, mean_ms, runs, number, spread, results_ms, comparisons, vendor,"
                    " notes, measured_at, checked_against)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)

    def record(self, key: str) -> dict | None:
        """Every stored column of ``key`` (program, trace, timings...), as a dictionary."""
        with self._lock:
            cursor = self._conn.execute("SELECT * FROM measurements WHERE key = ?", (key,))
            row = cursor.fetchone()
            names = [d[0] for d in cursor.description]
        return None if row is None else dict(zip(names, row))

    def count(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]

    # ------------------------------------------------------------ vendor references

    def vendor_lookup(self, key: str) -> tuple[bool, VendorResult | None]:
        """(known, result): whether the workload's vendor reference was
        looked for, and what was found (None: there is none)."""
        row = self._read("SELECT result FROM vendor WHERE key = ?", (key,))
        if row is None:
            return False, None
        return True, (VendorResult.from_json(json.loads(row[0])) if row[0] else None)

    def vendor_store(self, key: str, result: VendorResult | None) -> None:
        self._write("INSERT OR REPLACE INTO vendor (key, result, measured_at) VALUES (?, ?, ?)",
                    (key, None if result is None else json.dumps(result.to_json()), time.time()))

    def _read(self, sql: str, params: tuple):
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchone()
            except sqlite3.Error as e:
                raise CacheError(f"measurement cache {self.path}: cannot read ({e})") from None

    def _write(self, sql: str, params: tuple) -> None:
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(sql, params)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:
                raise CacheError(f"measurement cache {self.path}: cannot write ({e})") from None


def migrate(conn: sqlite3.Connection, found: int, path: Path | str = "<cache>") -> None:
    """Bring a version-``found`` database to ``SCHEMA_VERSION``; refuse a newer one."""
    if found > SCHEMA_VERSION:
        raise CacheError(f"measurement cache {path} has schema version {found}, newer than this leir-lsp "
                         f"understands ({SCHEMA_VERSION}): upgrade leir-lsp, or choose another cache directory "
                         f"(LEIR_CACHE_DIR)")
    for version in range(found, SCHEMA_VERSION):
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have migrated it since we read the version.
            current = int(conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0])
            if current == version:
                MIGRATIONS[version](conn)
                conn.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (str(version + 1),))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def _comparison_json(c: Comparison) -> dict:
    return {"ok": c.ok, "max_abs_err": c.max_abs_err, "max_rel_err": c.max_rel_err, "mse": c.mse,
            "criterion": c.criterion, "mismatched": c.mismatched}
