"""Durable storage of smart-padding measurements in SQLite.

Measurements are slow and precious, so every one is committed the moment it is taken:

* **WAL journal, ``synchronous=FULL``.** In WAL mode ``NORMAL`` already survives a
  killed process (``kill -9``), but a power cut or kernel crash may lose the last
  commits. ``FULL`` fsyncs the WAL on every commit. That costs about a millisecond per
  commit, while every committed row took at least tens of milliseconds of timed runs, so
  the full guarantee is cheap here; it matters on boards that get unplugged.
* **One transaction per unit of work.** A padding pair is one ``INSERT`` into
  ``padding``; a configuration (single-layer and padded timings, Eq. 4) is one
  ``INSERT`` into ``measurements``. Each is therefore either complete or absent after a
  crash: there is no partial row to repair.
* **Unique keys and skip-if-present.** ``padding`` is keyed by ``(env_id, h, w, c)`` and
  ``measurements`` by ``(env_id, config_key)``; inserts are ``INSERT OR IGNORE`` and the
  runner asks :meth:`Store.done_keys` / :meth:`Store.padding_lut` before measuring, so a
  re-run with the same arguments measures only what is missing and never duplicates.

Schema (``SCHEMA_VERSION`` 1)
-----------------------------
``meta(key, value)``: schema version, creation time.

``environments``: one provenance record per distinct measuring environment.
    env_id (PK), fingerprint (UNIQUE: sha256 of device, runner environment and
    measurement settings, so the same set-up maps to the same env_id on resume),
    device (user's device name), runner, provenance ("measured" | "estimated"),
    precision, threads, host (JSON: hostname, os, cpu model, core count), device_name
    (what the runner says it measures on), versions (JSON: library versions),
    environment (JSON: everything ``Runner.environment()`` returned), settings (JSON:
    protocol, warm-up, runs, weights seed, model format and precision, bench version),
    created_at (ISO 8601 UTC).

``padding``: the padding-only lookup table (Fig. 5b), per environment.
    (env_id, h, w, c) PK, median_ms, p10_ms, p90_ms, mad_ms, mean_ms, std_ms, min_ms, n,
    measured_at.

``measurements``: one row per layer under measurement; seq (PK, insertion order),
    (env_id, config_key) UNIQUE, layer_type, params (canonical JSON), ops,
    single_{median,p10,p90,mad}_ms + single_n (Fig. 5a),
    padded_{median,p10,p90,mad}_ms + padded_n (Fig. 5c, T_c),
    b1_keys (JSON list of [h, w, c]: T_b1 is the sum of their LUT medians),
    b2_key (JSON [h, w, c]), t_b1_ms, t_b2_ms, t_lum_lo_ms, t_lum_hi_ms, t_lum_ms (Eq. 4
    and its midpoint), measured_at.

``networks``: whole networks measured on the target (``bench calibrate``, ``bench networks``),
    one row per (env_id, name): family, source ("space" | "zoo" | "onnx"), detail (JSON: how
    to build it again), onnx (the network as the estimator reads it: simplified, weights
    stripped), onnx_sha256, added_at.

``network_rounds``: one row per (env_id, name, round): the round's timing statistics
    (median, p10, p90, mad, mean, std, min ms, n) and measured_at. Rounds are interleaved
    over all networks of a run, so a slow spell of the target hits them all alike.

``failures``: configurations the runner could not build or run (e.g. an operator the
    target lacks), so a resume does not retry them unless asked (``--retry-failed``).
    (env_id, config_key) PK, layer_type, params, error, failed_at.

``refine_rounds``: the rounds of ``bench refine`` (:mod:`bench.refine`), so that a resumed
    refinement continues its budget and its record instead of starting them again. One row per
    (env_id, refinement, round): refinement (what identifies one refinement: a digest of the
    refined profile's name and its targets), plan (JSON ``[[layer_type, params], ...]``: the
    round's configurations, committed before any is measured; a run killed mid-round resumes
    this plan), started_at, device_seconds (measuring time of the runs that measured the
    round), measuring_since (set while a run measures it: a killed run leaves it, and the next
    run adds the time from it to the last row committed after it, :meth:`Store.close_cut_rounds`),
    finished_at (NULL while the round's plan is cut by a kill), widths (JSON: the targets'
    widths after the round). Round 0 has an empty plan and the widths before refining.

``measured_at`` and ``failed_at`` of layer rows, padding pairs and failures are to the
millisecond: a killed run's device time is read from them.

:meth:`Store.export_rows` maps measurements to :data:`estimator.dataset.COLUMNS`;
:func:`export_csv` writes them with :func:`estimator.dataset.write_measurements` plus a
``<file>.provenance.json`` sidecar holding the environment records the rows' ``env_id``
refer to. :func:`export_parquet` does the same as Parquet (needs pyarrow).
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from estimator.dataset import COLUMNS, write_measurements
from estimator.errors import UserError

from .runners.base import Timing

__all__ = ["Store", "StorageError", "SCHEMA_VERSION", "export_csv", "export_parquet", "provenance_path",
           "env_fingerprint"]

SCHEMA_VERSION = 1


class StorageError(UserError):
    """A benchmark database that cannot be opened or is not one."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS environments (
    env_id       INTEGER PRIMARY KEY AUTOINCREMENT,
    fingerprint  TEXT NOT NULL UNIQUE,
    device       TEXT NOT NULL,
    runner       TEXT NOT NULL,
    provenance   TEXT NOT NULL CHECK (provenance IN ('measured', 'estimated')),
    precision    TEXT NOT NULL,
    threads      INTEGER,
    host         TEXT NOT NULL,
    device_name  TEXT,
    versions     TEXT NOT NULL,
    environment  TEXT NOT NULL,
    settings     TEXT NOT NULL,
    created_at   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS padding (
    env_id      INTEGER NOT NULL REFERENCES environments(env_id),
    h           INTEGER NOT NULL,
    w           INTEGER NOT NULL,
    c           INTEGER NOT NULL,
    median_ms   REAL NOT NULL,
    p10_ms      REAL NOT NULL,
    p90_ms      REAL NOT NULL,
    mad_ms      REAL NOT NULL,
    mean_ms     REAL NOT NULL,
    std_ms      REAL NOT NULL,
    min_ms      REAL NOT NULL,
    n           INTEGER NOT NULL,
    measured_at TEXT NOT NULL,
    PRIMARY KEY (env_id, h, w, c)
);
CREATE TABLE IF NOT EXISTS measurements (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    env_id           INTEGER NOT NULL REFERENCES environments(env_id),
    config_key       TEXT NOT NULL,
    layer_type       TEXT NOT NULL,
    params           TEXT NOT NULL,
    ops              REAL NOT NULL,
    single_median_ms REAL, single_p10_ms REAL, single_p90_ms REAL, single_mad_ms REAL, single_n INTEGER,
    padded_median_ms REAL NOT NULL, padded_p10_ms REAL NOT NULL, padded_p90_ms REAL NOT NULL,
    padded_mad_ms    REAL NOT NULL, padded_n INTEGER NOT NULL,
    b1_keys          TEXT NOT NULL,
    b2_key           TEXT NOT NULL,
    t_b1_ms          REAL NOT NULL,
    t_b2_ms          REAL NOT NULL,
    t_lum_lo_ms      REAL NOT NULL,
    t_lum_hi_ms      REAL NOT NULL,
    t_lum_ms         REAL NOT NULL,
    measured_at      TEXT NOT NULL,
    UNIQUE (env_id, config_key)
);
CREATE INDEX IF NOT EXISTS measurements_type ON measurements(layer_type);
CREATE TABLE IF NOT EXISTS networks (
    env_id      INTEGER NOT NULL REFERENCES environments(env_id),
    name        TEXT NOT NULL,
    family      TEXT NOT NULL,
    source      TEXT NOT NULL,
    detail      TEXT NOT NULL,
    onnx        BLOB NOT NULL,
    onnx_sha256 TEXT NOT NULL,
    added_at    TEXT NOT NULL,
    PRIMARY KEY (env_id, name)
);
CREATE TABLE IF NOT EXISTS network_rounds (
    env_id      INTEGER NOT NULL REFERENCES environments(env_id),
    name        TEXT NOT NULL,
    round       INTEGER NOT NULL,
    median_ms   REAL NOT NULL,
    p10_ms      REAL NOT NULL,
    p90_ms      REAL NOT NULL,
    mad_ms      REAL NOT NULL,
    mean_ms     REAL NOT NULL,
    std_ms      REAL NOT NULL,
    min_ms      REAL NOT NULL,
    n           INTEGER NOT NULL,
    measured_at TEXT NOT NULL,
    PRIMARY KEY (env_id, name, round)
);
CREATE TABLE IF NOT EXISTS failures (
    env_id      INTEGER NOT NULL REFERENCES environments(env_id),
    config_key  TEXT NOT NULL,
    layer_type  TEXT NOT NULL,
    params      TEXT NOT NULL,
    error       TEXT NOT NULL,
    failed_at   TEXT NOT NULL,
    PRIMARY KEY (env_id, config_key)
);
CREATE TABLE IF NOT EXISTS refine_rounds (
    env_id          INTEGER NOT NULL REFERENCES environments(env_id),
    refinement      TEXT NOT NULL,
    round           INTEGER NOT NULL,
    plan            TEXT NOT NULL,
    started_at      TEXT NOT NULL,
    device_seconds  REAL NOT NULL DEFAULT 0,
    measuring_since TEXT,
    finished_at     TEXT,
    widths          TEXT,
    PRIMARY KEY (env_id, refinement, round)
);
"""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _stamp() -> str:
    """When a row was measured, to the millisecond (ISO 8601 UTC; sorts as text with
    :func:`_now`'s)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _dumps(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"), default=str)


def env_fingerprint(device: str, environment: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    return hashlib.sha256(_dumps({"device": device, "environment": environment, "settings": settings}).encode()).hexdigest()


def provenance_path(path: str | Path) -> Path:
    """The sidecar of an exported dataset: ``<file>.provenance.json``."""
    p = Path(path)
    return p.with_name(p.name + ".provenance.json")


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection; on read-only storage, where SQLite cannot create a WAL
    database's shared-memory file, the file is opened as immutable (nobody can write it there)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60.0)
    try:
        con.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        return con
    except sqlite3.OperationalError:
        con.close()
        if os.access(path.parent, os.W_OK):
            raise
        return sqlite3.connect(f"file:{path}?immutable=1", uri=True)


def _refuse_foreign(path: Path) -> None:
    """Refuse, reading it only, a file that is not a benchmark database: an SQLite database
    of another tool (its tables and no bench ``meta`` table) or any other file. An empty file or
    an empty SQLite database is taken."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    try:
        con = _connect_readonly(path)
        try:
            tables = sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'"))
            if tables and "meta" not in tables:
                shown = ", ".join(tables[:5]) + (f" and {len(tables) - 5} more" if len(tables) > 5 else "")
                raise StorageError(f"{path}: not a benchmark database (it holds tables {shown} and no bench meta "
                                   "table); give another --out")
            if tables and con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() is None:
                raise StorageError(f"{path}: not a benchmark database (its meta table has no schema version)")
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        raise StorageError(f"{path}: not a benchmark database ({e})") from e


class Store:
    """A benchmark database (one file; open it once per process)."""

    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        """Open (creating it) a benchmark database for writing; ``readonly``: an existing one
        for reading, where nothing is written (read-only storage included)."""
        self.path = Path(path)
        if self.path.is_dir():
            raise StorageError(f"{self.path} is a directory, not a benchmark database")
        if readonly:
            self._open_readonly()
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StorageError(f"{self.path}: cannot create its directory {self.path.parent} "
                               f"({e.strerror or e})") from None
        _refuse_foreign(self.path)  # before anything is written to it
        try:
            # autocommit mode: every statement outside an explicit BEGIN is its own transaction
            self.db = sqlite3.connect(str(self.path), timeout=60.0, isolation_level=None)
            self.db.row_factory = sqlite3.Row
            mode = self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StorageError(f"{self.path}: cannot use WAL journaling (got {mode!r})")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.executescript(_SCHEMA)
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('created_at', ?)", (_now(),))
            v = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
        except sqlite3.OperationalError as e:
            if "readonly" in str(e) or "unable to open" in str(e):
                raise StorageError(f"{self.path}: cannot write the benchmark database there ({e})") from e
            raise StorageError(f"{self.path}: not a benchmark database ({e})") from e
        except sqlite3.DatabaseError as e:
            raise StorageError(f"{self.path}: not a benchmark database ({e})") from e
        if int(v) != SCHEMA_VERSION:
            raise StorageError(f"{self.path}: schema version {v}, this bench writes {SCHEMA_VERSION}")

    def _open_readonly(self) -> None:
        try:
            self.db = _connect_readonly(self.path)
            self.db.row_factory = sqlite3.Row
            row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.DatabaseError as e:
            raise StorageError(f"{self.path}: not a benchmark database ({e})") from e
        if row is None:
            raise StorageError(f"{self.path}: not a benchmark database (no schema version)")
        if int(row[0]) != SCHEMA_VERSION:
            raise StorageError(f"{self.path}: schema version {row[0]}, this bench reads {SCHEMA_VERSION}")

    @classmethod
    def open_existing(cls, path: str | Path) -> "Store":
        """An existing database, read-only (``bench show``, ``export``, ``profile``)."""
        p = Path(path)
        if not p.is_file():
            raise StorageError(f"{p}: no such benchmark database")
        return cls(p, readonly=True)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------- environments

    def environment_id(self, device: str, environment: Mapping[str, Any], settings: Mapping[str, Any]) -> int:
        """The env_id of this (device, environment, settings), creating the record once."""
        fp = env_fingerprint(device, environment, settings)
        host = environment.get("host") or {}
        versions = dict(environment.get("versions") or {})
        if environment.get("runtime") and environment.get("runtime_version"):  # runners without a versions map
            versions.setdefault(str(environment["runtime"]), environment["runtime_version"])
        if isinstance(host, dict) and host.get("python"):
            versions.setdefault("python", host["python"])
        if settings.get("bench_version"):
            versions.setdefault("confident-latency", settings["bench_version"])
        self.db.execute(
            "INSERT OR IGNORE INTO environments (fingerprint, device, runner, provenance, precision, threads, host,"
            " device_name, versions, environment, settings, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (fp, device, environment.get("runner", "?"), environment.get("provenance", "measured"),
             environment.get("precision") or settings.get("precision") or "unknown", environment.get("threads"), _dumps(host),
             environment.get("device_name"), _dumps(versions), _dumps(environment),
             _dumps(settings), _now()),
        )
        return int(self.db.execute("SELECT env_id FROM environments WHERE fingerprint=?", (fp,)).fetchone()[0])

    def environments(self) -> list[dict[str, Any]]:
        out = []
        for r in self.db.execute("SELECT * FROM environments ORDER BY env_id"):
            d = dict(r)
            for k in ("host", "versions", "environment", "settings"):
                d[k] = json.loads(d[k])
            out.append(d)
        return out

    # ----------------------------------------------------------------- padding

    def padding_lut(self, env_id: int) -> dict[tuple[int, int, int], Timing]:
        lut = {}
        for r in self.db.execute("SELECT * FROM padding WHERE env_id=?", (env_id,)):
            lut[(r["h"], r["w"], r["c"])] = Timing(r["median_ms"], r["p10_ms"], r["p90_ms"], r["mad_ms"],
                                                   r["mean_ms"], r["std_ms"], r["min_ms"], r["n"])
        return lut

    def add_padding(self, env_id: int, key: tuple[int, int, int], t: Timing) -> bool:
        """Commit one padding-pair measurement; False if it was already there."""
        cur = self.db.execute(
            "INSERT OR IGNORE INTO padding VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (env_id, *map(int, key), t.median_ms, t.p10_ms, t.p90_ms, t.mad_ms, t.mean_ms, t.std_ms, t.min_ms,
             t.n, _stamp()),
        )
        return cur.rowcount == 1

    # ------------------------------------------------------------- measurements

    def done_keys(self, env_id: int) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT config_key FROM measurements WHERE env_id=?", (env_id,))}

    def add_measurement(self, env_id: int, row: Mapping[str, Any]) -> bool:
        """Commit one LUM measurement (all its columns in one statement); False if present."""
        cols = ("env_id", "config_key", "layer_type", "params", "ops",
                "single_median_ms", "single_p10_ms", "single_p90_ms", "single_mad_ms", "single_n",
                "padded_median_ms", "padded_p10_ms", "padded_p90_ms", "padded_mad_ms", "padded_n",
                "b1_keys", "b2_key", "t_b1_ms", "t_b2_ms", "t_lum_lo_ms", "t_lum_hi_ms", "t_lum_ms", "measured_at")
        vals = dict(row)
        vals["env_id"] = env_id
        vals.setdefault("measured_at", _stamp())
        for k in ("params", "b1_keys", "b2_key"):
            if not isinstance(vals[k], str):
                vals[k] = _dumps(vals[k])
        cur = self.db.execute(
            f"INSERT OR IGNORE INTO measurements ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            tuple(vals.get(c) for c in cols),
        )
        return cur.rowcount == 1

    def failed_keys(self, env_id: int) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT config_key FROM failures WHERE env_id=?", (env_id,))}

    def add_failure(self, env_id: int, config_key: str, layer_type: str, params: Any, error: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO failures VALUES (?,?,?,?,?,?)",
                        (env_id, config_key, layer_type, params if isinstance(params, str) else _dumps(params),
                         error[:2000], _stamp()))

    def clear_failures(self, env_id: int) -> int:
        return self.db.execute("DELETE FROM failures WHERE env_id=?", (env_id,)).rowcount

    def failures(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.execute("SELECT * FROM failures ORDER BY failed_at")]

    def measurements(self, env_id: int | None = None) -> list[dict[str, Any]]:
        q = "SELECT m.*, e.runner AS runner FROM measurements m JOIN environments e USING (env_id)"
        args: tuple = ()
        if env_id is not None:
            q += " WHERE m.env_id=?"
            args = (env_id,)
        return [dict(r) for r in self.db.execute(q + " ORDER BY m.seq", args)]

    def count(self, env_id: int | None = None) -> int:
        if env_id is None:
            return int(self.db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0])
        return int(self.db.execute("SELECT COUNT(*) FROM measurements WHERE env_id=?", (env_id,)).fetchone()[0])

    # ----------------------------------------------------------------- networks

    def add_network(self, env_id: int, name: str, family: str, source: str, detail: Mapping[str, Any],
                    onnx: bytes, onnx_sha256: str) -> None:
        """Record a network of a run (once; the same name must always be the same network)."""
        row = self.db.execute("SELECT onnx_sha256 FROM networks WHERE env_id=? AND name=?", (env_id, name)).fetchone()
        if row is not None:
            if row[0] != onnx_sha256:
                raise StorageError(f"{self.path}: network {name!r} was recorded as another graph (SHA-256 "
                                   f"{row[0][:12]}, now {onnx_sha256[:12]}): its source no longer builds the same "
                                   f"network; use another --db or --seed")
            return
        self.db.execute("INSERT INTO networks VALUES (?,?,?,?,?,?,?,?)",
                        (env_id, name, family, source, _dumps(detail), sqlite3.Binary(onnx), onnx_sha256, _now()))

    def network_rounds(self, env_id: int) -> dict[str, dict[int, tuple[Timing, str]]]:
        """name -> round -> (timing, measured_at) of the rounds taken so far."""
        out: dict[str, dict[int, tuple[Timing, str]]] = {}
        for r in self.db.execute("SELECT * FROM network_rounds WHERE env_id=?", (env_id,)):
            t = Timing(r["median_ms"], r["p10_ms"], r["p90_ms"], r["mad_ms"], r["mean_ms"], r["std_ms"], r["min_ms"],
                       r["n"])
            out.setdefault(r["name"], {})[int(r["round"])] = (t, r["measured_at"])
        return out

    def add_network_round(self, env_id: int, name: str, round_: int, t: Timing) -> bool:
        """Commit one round of one network; False if it was already there."""
        cur = self.db.execute("INSERT OR IGNORE INTO network_rounds VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                              (env_id, name, int(round_), t.median_ms, t.p10_ms, t.p90_ms, t.mad_ms, t.mean_ms,
                               t.std_ms, t.min_ms, t.n, _now()))
        return cur.rowcount == 1

    def networks(self, env_id: int) -> list[dict[str, Any]]:
        out = []
        for r in self.db.execute("SELECT * FROM networks WHERE env_id=? ORDER BY added_at, name", (env_id,)):
            d = dict(r)
            d["detail"] = json.loads(d["detail"])
            d["onnx"] = bytes(d["onnx"])
            out.append(d)
        return out

    # ------------------------------------------------------------ refine rounds

    def refine_rounds(self, env_id: int, refinement: str) -> list[dict[str, Any]]:
        """The rounds of one refinement, in order (``plan`` and ``widths`` parsed)."""
        out = []
        for r in self.db.execute("SELECT * FROM refine_rounds WHERE env_id=? AND refinement=? ORDER BY round",
                                 (env_id, refinement)):
            d = dict(r)
            d["plan"] = json.loads(d["plan"])
            d["widths"] = None if d["widths"] is None else json.loads(d["widths"])
            out.append(d)
        return out

    def add_refine_round(self, env_id: int, refinement: str, round_: int, plan: Any, widths: Any = None) -> None:
        """Commit a round and its plan (``[[layer_type, params], ...]``) before measuring it;
        with ``widths``, a finished round with nothing to measure (round 0)."""
        now = _stamp()
        self.db.execute("INSERT OR IGNORE INTO refine_rounds (env_id, refinement, round, plan, started_at, "
                        "finished_at, widths) VALUES (?,?,?,?,?,?,?)",
                        (env_id, refinement, int(round_), _dumps(plan), now, None if widths is None else now,
                         None if widths is None else _dumps(widths)))

    def start_refine_measuring(self, env_id: int, refinement: str, round_: int) -> None:
        self.db.execute("UPDATE refine_rounds SET measuring_since=? WHERE env_id=? AND refinement=? AND round=?",
                        (_stamp(), env_id, refinement, int(round_)))

    def end_refine_measuring(self, env_id: int, refinement: str, round_: int, seconds: float,
                             finished: bool = True) -> None:
        """A run measured the round for ``seconds``; ``finished``: its plan is done (or cut by
        the budget), a later run does not go on with it."""
        self.db.execute("UPDATE refine_rounds SET device_seconds=device_seconds+?, measuring_since=NULL, "
                        "finished_at=CASE WHEN ? THEN ? ELSE finished_at END "
                        "WHERE env_id=? AND refinement=? AND round=?",
                        (float(seconds), bool(finished), _stamp(), env_id, refinement, int(round_)))

    def set_refine_widths(self, env_id: int, refinement: str, round_: int, widths: Any) -> None:
        self.db.execute("UPDATE refine_rounds SET widths=? WHERE env_id=? AND refinement=? AND round=?",
                        (_dumps(widths), env_id, refinement, int(round_)))

    def close_cut_rounds(self, env_id: int, refinement: str) -> float:
        """Account for the measuring a killed run left open: each such round gets the time from
        its ``measuring_since`` to the last layer row, padding pair or failure committed after
        it (what the killed run measured; the measurement it was killed in is lost, and not
        counted). Returns the seconds added."""
        added = 0.0
        self.db.execute("BEGIN IMMEDIATE")
        try:
            open_ = self.db.execute("SELECT round, measuring_since FROM refine_rounds WHERE env_id=? AND "
                                    "refinement=? AND measuring_since IS NOT NULL", (env_id, refinement)).fetchall()
            for round_, since in open_:
                stamps = [self.db.execute(f"SELECT MAX({col}) FROM {table} WHERE env_id=? AND {col} >= ?",
                                          (env_id, since)).fetchone()[0]
                          for table, col in (("measurements", "measured_at"), ("padding", "measured_at"),
                                             ("failures", "failed_at"))]
                last = max((t for t in stamps if t), default=None)
                dt = 0.0 if last is None else max(
                    0.0, (datetime.fromisoformat(last) - datetime.fromisoformat(since)).total_seconds())
                added += dt
                self.db.execute("UPDATE refine_rounds SET device_seconds=device_seconds+?, measuring_since=NULL "
                                "WHERE env_id=? AND refinement=? AND round=?", (dt, env_id, refinement, round_))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return added

    def export_rows(self, env_id: int | None = None) -> list[dict[str, Any]]:
        """Measurements as rows with exactly :data:`estimator.dataset.COLUMNS`."""
        out = []
        for m in self.measurements(env_id):
            out.append({
                "layer_type": m["layer_type"],
                "params": m["params"],
                "ops": m["ops"],
                "t_single_ms": m["single_median_ms"] if m["single_median_ms"] is not None else "",
                "t_padded_ms": m["padded_median_ms"],
                "t_b1_ms": m["t_b1_ms"],
                "t_b2_ms": m["t_b2_ms"],
                "t_lum_lo_ms": m["t_lum_lo_ms"],
                "t_lum_hi_ms": m["t_lum_hi_ms"],
                "t_lum_ms": m["t_lum_ms"],
                "padded_p10_ms": m["padded_p10_ms"],
                "padded_p90_ms": m["padded_p90_ms"],
                "padded_mad_ms": m["padded_mad_ms"],
                "n_runs": m["padded_n"],
                "runner": m["runner"],
                "env_id": m["env_id"],
            })
        assert all(tuple(r) == COLUMNS for r in out)
        return out


def _write_provenance(store: Store, path: Path) -> Path:
    side = provenance_path(path)
    side.write_text(json.dumps({"source": str(store.path), "exported_at": _now(),
                                "environments": store.environments()}, indent=2, sort_keys=True) + "\n")
    return side


def export_csv(store: Store, path: str | Path) -> tuple[int, Path]:
    """Write all measurements as a dataset CSV (+ provenance sidecar). Returns (rows, sidecar)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = store.export_rows()
    write_measurements(path, rows)
    return len(rows), _write_provenance(store, path)


def export_parquet(store: Store, path: str | Path) -> tuple[int, Path]:
    """The same rows as :func:`export_csv`, as Parquet (requires pyarrow)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError("Parquet export needs pyarrow, which is not installed (pip install pyarrow)") from None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = store.export_rows()
    types = {c: pa.float64() for c in COLUMNS if c.endswith("_ms") or c == "ops"}
    types.update(layer_type=pa.string(), params=pa.string(), runner=pa.string(), n_runs=pa.int64(),
                 env_id=pa.int64())
    cols = {}
    for c in COLUMNS:
        vals = [r[c] for r in rows]
        if types[c] == pa.float64():
            vals = [float("nan") if v in ("", None) else float(v) for v in vals]
        cols[c] = pa.array(vals, type=types[c])
    table = pa.table(cols)
    table = table.replace_schema_metadata({"provenance": json.dumps(store.environments(), sort_keys=True)})
    pq.write_table(table, str(path))
    return len(rows), _write_provenance(store, path)
