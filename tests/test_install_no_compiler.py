"""A clean copy of the project installs with no working C compiler, and runs in pure Python.

pip builds the project from a copy of this checkout (its tracked and untracked, not ignored
files: no built extension) into a throwaway venv with ``CC=false CXX=false``. The venv gets
the build requirements of ``pyproject.toml`` installed into it, and sees the runtime
dependencies of the environment running the tests through a path file (the base
interpreter's packages play no part: its setuptools may be old and it may lack ``wheel``).
pip then builds without isolation, which is the path where Cython runs and only the C
compiler is missing. The install must succeed, say so in one line of its log, and leave an
importer without :mod:`estimator.native_import` and Monte Carlo sums without
:mod:`estimator.native_mc`.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTE = "confident-latency: no C compiler, the native extensions (ONNX importer, Monte Carlo sums) are not built; pure Python is used"


def _clean_copy(dest: Path) -> None:
    """The checkout as a fresh clone would have it (git's view when there is one)."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"],
                             capture_output=True, check=True, timeout=60).stdout
        files = [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = None
    if files is None:  # (no git: copy all but build outputs)
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(
            ".git", "build", "*.so", "*.c", "__pycache__", "*.egg-info", "bench-data", "nas-out", ".cache"))
        return
    for f in files:
        src = ROOT / f
        if src.is_file() and not f.startswith(("bench-data/", "nas-out/")):
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)


def _venv_with_build_requirements(venv: Path, env: dict[str, str]) -> str:
    """A venv holding pyproject.toml's build requirements, and this environment's packages behind them."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    r = subprocess.run([py, "-m", "pip", "install", "--quiet", *requires], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    # appended after the venv's own site-packages: its build requirements come first
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    Path(site, "outer-environment.pth").write_text("".join(f"{p}\n" for p in ours))
    return py


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_installs_and_runs_without_a_c_compiler(tmp_path):
    src, venv = tmp_path / "src", tmp_path / "venv"
    src.mkdir()
    _clean_copy(src)
    assert not list((src / "estimator").glob("native_*.so"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CL_REQUIRE_NATIVE")}
    env.update(CC="false", CXX="false", PIP_DISABLE_PIP_VERSION_CHECK="1")
    py = _venv_with_build_requirements(venv, env)
    r = subprocess.run([py, "-m", "pip", "install", "-v", "--no-deps", "--no-build-isolation", "-e", str(src)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=480)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-4000:]
    assert sum(NOTE in line for line in log.splitlines()) == 1, log[-4000:]
    assert not list((src / "estimator").glob("native_*.so"))

    net = tmp_path / "net.onnx"
    code = (
        "import sys, numpy as np, estimator\n"
        "from estimator.onnx_import import load_network, native_core\n"
        "from tests.perf.service_common import mbv2_like_onnx\n"
        f"assert estimator.__file__.startswith({str(src)!r}), estimator.__file__\n"
        "assert native_core() is None\n"
        "from estimator.aggregate import native_mc\n"
        "assert native_mc() is None\n"
        "data = mbv2_like_onnx(np.random.default_rng(0))\n"
        f"open({str(net)!r}, 'wb').write(data)\n"
        "print(len(load_network(data).layers))\n")
    r = subprocess.run([py, "-c", code], cwd=src, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    assert int(r.stdout.strip()) > 10
    # the console script of the venv, in pure Python
    r = subprocess.run([str(venv / "bin" / "estimator"), "layers", str(net)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "conv2d" in r.stdout
