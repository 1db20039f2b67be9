"""Several `nas search` workers on one study in a real PostgreSQL server.

A throwaway PostgreSQL cluster (``tests/pg.py``: initdb + pg_ctl on a free loopback port)
holds the study; each worker is a separate ``python -m nas.cli search`` process with its
own in-process estimation service. Skipped only when the PostgreSQL server binaries are
missing (``apt-get install -y postgresql``); psycopg2 comes from the ``postgres`` extra.
"""
from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.pg import SKIP_REASON, PostgresServer, postgres_binaries
from tests.test_nas import DEVICE, build_env

pytestmark = [pytest.mark.slow, pytest.mark.skipif(postgres_binaries() is None, reason=SKIP_REASON)]

REPO = Path(__file__).resolve().parents[1]


def slow_objective(model: Any, trial: Any) -> float:
    """A constant score after NAS_TEST_SLEEP seconds (a stand-in for training time)."""
    time.sleep(float(os.environ.get("NAS_TEST_SLEEP", "0")))
    return 1.0


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, Path]:
    return build_env(tmp_path_factory.getbasetemp() / "nas-env")


@pytest.fixture(scope="module")
def pg() -> Any:
    with PostgresServer() as server:
        server.wait_ready()
        server.createdb("nas")
        yield server


def worker(env: dict[str, Path], url: str, study: str, out: Path, trials: int, seed: int, sleep: float,
           log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "nas.cli", "search", "--device", DEVICE, "--budget", "10s", "--trials", str(trials),
           "--seed", str(seed), "--profiles", str(env["root"]), "--storage", url, "--study", study, "--out", str(out),
           "--space", "tests.test_nas:kernel_space", "--space-option", "kernels=[3,5,7]",
           "--objective", "tests.test_nas_distributed:slow_objective", "--heartbeat", "1", "--polish", "0", "--no-progress"]
    e = dict(os.environ, CL_CACHE_DIR=str(env["cache"]), NAS_TEST_SLEEP=str(sleep),
             PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    fh = log.open("wb")
    return subprocess.Popen(cmd, cwd=REPO, env=e, stdout=fh, stderr=subprocess.STDOUT)


def load(url: str, study: str) -> Any:
    import optuna

    from nas.storage import open_storage

    return optuna.load_study(study_name=study, storage=open_storage(url))


def _wait(p: subprocess.Popen, log: Path, timeout: float = 600) -> int:
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise AssertionError(f"worker timed out:\n{log.read_text(errors='replace')[-3000:]}")
    return rc


def test_two_workers_share_one_study(env, pg, tmp_path):
    url = pg.url("nas")
    a = worker(env, url, "shared", tmp_path / "a", 4, 1, 2.0, tmp_path / "a.log")
    b = worker(env, url, "shared", tmp_path / "b", 3, 2, 2.0, tmp_path / "b.log")
    ra, rb = _wait(a, tmp_path / "a.log"), _wait(b, tmp_path / "b.log")
    assert ra == 0, (tmp_path / "a.log").read_text(errors="replace")[-3000:]
    assert rb == 0, (tmp_path / "b.log").read_text(errors="replace")[-3000:]
    study = load(url, "shared")
    trials = study.trials
    assert len(trials) == 4 + 3
    assert sorted(t.number for t in trials) == list(range(7))
    assert all(t.state.name == "COMPLETE" for t in trials), [(t.number, t.state.name, t.user_attrs.get("fail_reason"))
                                                            for t in trials]
    by_worker: dict[str, list[Any]] = {}
    for t in trials:
        by_worker.setdefault(t.user_attrs["worker"], []).append(t)
    assert sorted(len(v) for v in by_worker.values()) == [3, 4]
    spans = [(min(t.datetime_start for t in v), max(t.datetime_complete for t in v)) for v in by_worker.values()]
    assert max(s for s, _ in spans) < min(e for _, e in spans), "the two workers did not run at the same time"
    # the worker that finished last reports the whole study
    last = max(("a", "b"), key=lambda d: (tmp_path / d / "summary.json").stat().st_mtime)
    assert "trials: 7 (7 complete)" in (tmp_path / last / "summary.txt").read_text()


def test_killed_worker_is_retried_and_the_study_continues(env, pg, tmp_path, capsys):
    from nas.cli import main as nas_main

    url = pg.url("nas")
    a = worker(env, url, "kill", tmp_path / "a", 50, 1, 4.0, tmp_path / "a.log")
    victim = None
    shown = False
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            time.sleep(0.3)
            if a.poll() is not None:
                raise AssertionError(f"worker exited early:\n{(tmp_path / 'a.log').read_text(errors='replace')}")
            try:
                trials = load(url, "kill").trials
            except KeyError:  # the study does not exist yet
                continue
            done = [t for t in trials if t.state.name == "COMPLETE"]
            if done and not shown:  # `nas show` on a study that is running right now
                assert nas_main(["show", "--storage", url, "--study", "kill"]) == 0
                assert "running" in capsys.readouterr().out
                shown = True
            running = [t for t in trials if t.state.name == "RUNNING"]
            if len(done) >= 2 and running:
                age = (dt.datetime.now() - running[0].datetime_start).total_seconds()
                if 0.3 <= age <= 2.0:  # well inside its 4 s objective: certainly still running
                    os.kill(a.pid, signal.SIGKILL)
                    a.wait()
                    victim = running[0]
                    break
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    assert victim is not None, "no trial to kill"
    before = load(url, "kill").trials
    assert before[victim.number].state.name == "RUNNING"  # nobody knows yet that its worker is dead
    n_before = len(before)
    time.sleep(3.0)  # > grace period (2 x --heartbeat 1 s)

    b = worker(env, url, "kill", tmp_path / "b", 3, 2, 0.0, tmp_path / "b.log")
    assert _wait(b, tmp_path / "b.log") == 0, (tmp_path / "b.log").read_text(errors="replace")[-3000:]
    trials = load(url, "kill").trials
    assert len(trials) == n_before + 3
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    assert trials[victim.number].state.name == "FAIL"
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == victim.number]
    assert len(retries) == 1
    retry = retries[0]
    assert retry.state.name == "COMPLETE" and retry.params == victim.params and retry.number >= n_before
    assert all(t.state.name == "COMPLETE" for t in trials if t.number >= n_before)
    summary = (tmp_path / "b" / "summary.txt").read_text()
    assert "retried after a dead worker: 1" in summary
    assert (f"last: trial {victim.number}: no reason recorded: its worker stopped (killed, interrupted or out of "
            f"heartbeats); retried as trial {retry.number})") in summary
