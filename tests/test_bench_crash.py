"""Crash safety of ``bench run``: SIGKILL a real run (once in the padding phase, once
among the layers), resume it with the same arguments, and check that nothing committed
was lost or changed, nothing was measured twice, and the plan is complete."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bench.sampling import limits_for, make_plan
from bench.smartpad import needed_padding

from .crash import count_rows, run_and_kill

LAYERS = "conv2d,dwconv2d,maxpool,add"
SAMPLES = 10
ARGS = ["--layers", LAYERS, "--samples", str(SAMPLES), "--prior-samples", "0", "--warmup", "2", "--runs", "25", "--max-ops", "2e7",
        "--seed", "3", "--no-progress"]


def _cmd(db: Path) -> list[str]:
    return [sys.executable, "-m", "bench.cli", "run", "--device", "crashbox", "--out", str(db), *ARGS]


def _snapshot(db: Path) -> tuple[dict, dict]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        con.row_factory = sqlite3.Row
        meas = {r["config_key"]: dict(r) for r in con.execute("SELECT * FROM measurements")}
        pads = {(r["env_id"], r["h"], r["w"], r["c"]): dict(r) for r in con.execute("SELECT * FROM padding")}
        return meas, pads
    finally:
        con.close()


def _counts(db: Path) -> tuple[int, int]:
    return count_rows(db, "padding"), count_rows(db, "measurements")


def _run_and_kill(db: Path, ready, timeout: float = 300.0) -> None:
    """Start a run, SIGKILL it as soon as ``ready(pads, rows)`` holds."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    run_and_kill(_cmd(db), lambda: ready(*_counts(db)), env=env, timeout=timeout)


@pytest.mark.slow
def test_sigkill_then_resume_loses_nothing_and_repeats_nothing(tmp_path):
    db = tmp_path / "crash.sqlite"
    plan = make_plan(LAYERS.split(","), SAMPLES, seed=3, limits=limits_for("onnxruntime", max_ops=2e7))
    n_pairs = len(needed_padding(plan))
    assert len(plan) == 4 * SAMPLES and n_pairs > 10

    # 1. killed early (each layer's padding pairs are measured just before it)
    _run_and_kill(db, lambda pads, rows: pads >= 3)
    meas1, pads1 = _snapshot(db)
    assert 3 <= len(pads1) < n_pairs and len(meas1) < len(plan)

    # 2. resumed and killed again among the layers
    _run_and_kill(db, lambda pads, rows: rows >= len(meas1) + 4)
    meas2, pads2 = _snapshot(db)
    assert len(meas1) + 4 <= len(meas2) < len(plan) and len(pads1) <= len(pads2) <= n_pairs
    assert all(pads2[k] == v for k, v in pads1.items())  # identical: not re-measured, not lost
    assert all(meas2[k] == v for k, v in meas1.items())

    # 3. resumed to completion
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    done = subprocess.run(_cmd(db), capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"({len(meas2)} already present, 0 failed" in done.stdout
    assert f"and {n_pairs - len(pads2)} padding pairs" in done.stdout  # only the missing ones: none twice
    meas3, pads3 = _snapshot(db)
    assert len(pads3) == n_pairs
    assert all(meas3[k] == v for k, v in meas2.items())  # rows from before the kill, unchanged
    assert all(pads3[k] == v for k, v in pads2.items())
    assert sorted(meas3) == sorted(c.key for c in plan)  # complete, no extras
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*), COUNT(DISTINCT env_id || config_key) FROM measurements").fetchone() == (
        len(plan), len(plan))
    assert con.execute("SELECT COUNT(*) FROM environments").fetchone()[0] == 1  # same env on every resume
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
