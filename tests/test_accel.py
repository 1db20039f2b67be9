"""The optional compiled accelerator (estimator.accel): loaded only for the exact source it
was compiled from, never in place of an edited module, off with CL_ACCEL=0, same numbers.

The build test compiles one small module with Cython (~1 min); it is skipped where Cython
or a C compiler is missing."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from estimator import accel
from estimator.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


def _py(code: str, cache: Path, **env: str) -> str:
    e = {**os.environ, "CL_CACHE_DIR": str(cache), **env}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=e, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "estimator.cli", "accel", *args], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "CL_CACHE_DIR": str(cache)}, timeout=900)


def test_status_without_builds_is_pure_python(tmp_path):
    r = _cli("status", "--json", cache=tmp_path)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert [m["module"] for m in st["modules"]] == list(accel.ALL)
    assert {m["state"] for m in st["modules"]} == {"missing"}
    out = _py("import estimator.onnx_import as m, estimator.accel as a; print(m.__file__); print(a.loaded())", tmp_path)
    assert out.splitlines() == [str(ROOT / "estimator" / "onnx_import.py"), "[]"]


def test_native_module_is_none_without_a_build(tmp_path):
    """A native module (a .pyx with no pure twin) does not exist until it is built: native()
    says None and its callers keep to Python; only NATIVE names are accepted."""
    assert _py("from estimator import accel; print(accel.native('estimator.native_import'))", tmp_path) == "None"
    assert _py("from estimator import accel; print(accel.native('estimator.native_import'))", tmp_path,
               CL_ACCEL="0") == "None"
    with pytest.raises(ValueError, match="not a native module"):
        accel.native("estimator.aggregate")


def test_a_file_for_another_source_version_is_never_loaded(tmp_path):
    """A compiled file named for an older source is stale: the .py is imported (a broken
    'extension' under that name would fail the import if the finder tried it)."""
    d = accel.accel_dir(tmp_path)
    d.mkdir(parents=True)
    stale = d / f"aggregate-{'0' * 32}{accel._SUFFIX}"
    stale.write_bytes(b"not a shared object")
    stale.chmod(0o700)
    out = _py("import estimator.aggregate as m; print(m.__file__)", tmp_path)
    assert out == str(ROOT / "estimator" / "aggregate.py")
    states = {r["module"]: r["state"] for r in json.loads(_cli("status", "--json", cache=tmp_path).stdout)["modules"]}
    assert states["estimator.aggregate"] == "stale"


def test_untrusted_compiled_file_is_ignored(tmp_path):
    src = accel._source("estimator.aggregate")
    so = accel.compiled_path("estimator.aggregate", src, tmp_path)
    so.parent.mkdir(parents=True)
    so.write_bytes(b"not a shared object")
    so.chmod(0o766)  # writable by group and others
    out = _py("import estimator.aggregate as m; print(m.__file__)", tmp_path)
    assert out.endswith("estimator/aggregate.py")
    assert {r["module"]: r["state"] for r in accel.status(tmp_path)}["estimator.aggregate"] == "untrusted"


def test_build_rejects_unknown_module(tmp_path):
    r = _cli("build", "--module", "estimator.cli", cache=tmp_path)
    assert r.returncode == 2 and "invalid choice" in r.stderr


def _can_compile() -> bool:
    try:
        import Cython  # noqa: F401
    except ImportError:
        return False
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None and Path(sysconfig.get_paths()["include"], "Python.h").is_file()


@pytest.mark.skipif(not _can_compile(), reason="needs Cython and a C compiler (pip install -e '.[accel]')")
def test_compiled_module_loads_and_gives_the_same_numbers(tmp_path):
    r = _cli("build", "--module", "estimator.aggregate", cache=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "compiled 1 module(s)" in r.stdout
    so = accel.compiled_path("estimator.aggregate", accel._source("estimator.aggregate"), tmp_path)
    assert so.is_file()
    code = ("import numpy as np, estimator.aggregate as m, estimator.accel as a\n"
            "rng = np.random.default_rng(3); t = rng.gamma(2.0, 1.0, 10_000)\n"
            "print(m.__file__); print(a.loaded())\n"
            "print(repr(m._quantiles(t, [0.05, 0.95, 0.005, 0.995])))\n"
            "print(repr(m.intervals_from_samples(t, [0.9, 0.5])))\n"
            # an int where the annotation says float: Python's semantics, not a C double's
            "print(repr(m.intervals_from_samples(t, [0.9], clip_min=0)))\n")
    fast = _py(code, tmp_path).splitlines()
    pure = _py(code, tmp_path, CL_ACCEL="0").splitlines()
    assert fast[0] == str(so) and fast[1] == "['estimator.aggregate']"
    assert pure[0].endswith("estimator/aggregate.py") and pure[1] == "[]"
    assert fast[2:] == pure[2:]
    st = {r["module"]: r["state"] for r in accel.status(tmp_path)}
    assert st["estimator.aggregate"] == "compiled"
    r = _cli("clean", cache=tmp_path)
    assert r.returncode == 0 and "removed 1" in r.stdout
    assert not so.exists()


def test_build_without_cython_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "Cython", None)
    monkeypatch.setitem(sys.modules, "Cython.Build", None)
    with pytest.raises(UserError, match=r"pip install 'confident-latency\[accel\]'"):
        accel.build(["estimator.aggregate"], root=tmp_path)
    assert not accel.accel_dir(tmp_path).exists() or not any(accel.accel_dir(tmp_path).iterdir())
