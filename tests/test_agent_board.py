"""``bench agent`` on a board installed as docs/boards.md says: the agent's packages only,
no onnx, torch, scikit-learn or TensorFlow. The real ``bench`` command (every subcommand
registered, as the console script does) runs in a subprocess where importing those packages
fails as it does when they are not installed; the agent serves the ONNX Runtime runner, and
this process (the host, with every package) times a real model through it. The commands
that need a missing package say so in one line.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

from bench.modelgen import padded_model, to_onnx  # noqa: E402
from bench.runners.base import get_runner  # noqa: E402

from .service_support import agent_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: what a board's venv lacks (docs/boards.md installs numpy, grpcio, protobuf and tqdm only)
ABSENT = ("onnx", "onnxsim", "torch", "sklearn", "scipy", "tensorflow", "crepes", "optuna")
BENCH_WITHOUT = f"""
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {ABSENT!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Absent())
from bench.cli import main
rc = main(sys.argv[1:])
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({ABSENT!r}))
assert not loaded, loaded
sys.exit(rc)
"""


def _bench(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BENCH_WITHOUT, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, **kw)


def test_agent_serves_onnxruntime_without_the_host_packages() -> None:
    proc = subprocess.Popen([sys.executable, "-c", BENCH_WITHOUT, "agent", "--runner", "onnxruntime", "--port", "0"],
                            cwd=ROOT, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        port = agent_port(proc, "onnxruntime", "onnx")
        model = to_onnx(padded_model("conv2d", dict(h=8, w=8, c_in=4, c_out=8, k_h=3, k_w=3, s_h=1, s_w=1)))
        with get_runner("agent", agent=f"127.0.0.1:{port}") as r:
            env = r.environment()
            assert env["runner"] == "onnxruntime" and "onnx" not in env["versions"]
            assert r.time(r.prepare(model), warmup=1, runs=3).n == 3
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=60)[1]
        assert proc.returncode == 0, rest  # the subprocess also asserts that no absent package was imported
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_commands_that_need_a_missing_package_say_so() -> None:
    out = _bench("run", "--device", "x")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "invalid choice: 'run'" in out.stderr and "bench.cmd_run (package 'onnx' is not installed)" in out.stderr
    out = _bench("--help")
    assert out.returncode == 0 and "agent" in out.stdout
    assert "Not available here" in " ".join(out.stdout.split())
