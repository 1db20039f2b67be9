"""Kill a real command mid-run: the one helper of the crash-safety tests (bench run, bench
networks, bench refine)."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

import pytest


def count_rows(db: Path, table: str) -> int:
    """Rows of ``table`` in the SQLite database ``db`` (0 while the file or its schema is missing)."""
    if not db.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        try:
            return con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        finally:
            con.close()
    except sqlite3.OperationalError:  # schema not created yet
        return 0


def run_and_kill(cmd: Sequence[str], ready: Callable[[], bool], *, env: Mapping[str, str] | None = None,
                 timeout: float = 300.0) -> None:
    """Start ``cmd`` and SIGKILL it as soon as ``ready()`` holds; fails if it finished first or
    ``ready()`` did not hold within ``timeout`` seconds."""
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(env) if env is not None else None)
    t0 = time.monotonic()
    try:
        while True:
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"{' '.join(cmd[:4])} finished before it could be killed: {out!r} {err!r}")
            if ready():
                break
            if time.monotonic() - t0 > timeout:
                pytest.fail(f"{' '.join(cmd[:4])} made no progress in {timeout:g} s")
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
