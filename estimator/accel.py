"""Optional compiled accelerator: the service's hot modules compiled with Cython, unchanged.

The per-network cost of the fast path (issue 6) is spread over thousands of small Python
operations in the ONNX importer, the shape propagation, the Monte Carlo aggregation and the
response building; no single hotspot is left for numpy. Compiling those modules as they are
(Cython, no type annotations added, the same source) removes the interpreter's dispatch
overhead: about 14 % fewer instructions per ``EstimateNetwork`` (README, "Measured figures").

It is opt-in and never required::

    pip install -e '.[accel]'        # Cython (and a C compiler on the machine)
    estimator accel build            # compile MODULES into the cache directory
    estimator accel status           # which modules are compiled, stale or missing

How it stays safe:

* The compiled modules live in the cache directory (:func:`estimator.cache.cache_dir`,
  ``accel/``), never next to the sources, so an editable install's ``.py`` files are never
  shadowed by a build artefact.
* Each file is named after the SHA-256 of the exact source it was compiled from
  (``onnx_import-<digest>.cpython-311-...so``). :class:`_Finder` (a ``sys.meta_path``
  finder installed when :mod:`estimator` is imported) hashes a module's current ``.py``
  source at import and loads a compiled file only under that digest: edit the source and
  the pure-Python module is imported until the next ``estimator accel build``.
* As for model pickles, a file not owned by the current user or writable by group/others
  is ignored (:func:`estimator.cache._trusted`).
* ``CL_ACCEL=0`` turns the finder off (pure Python everywhere).

The compiled modules compute the same numbers: they run the same source (the tests compare
a compiled module's results with the pure one's).

Native modules (:data:`NATIVE`) are the other kind: a ``.pyx`` source beside the package's
``.py`` files, typed Cython with no pure-Python twin, built, named and loaded the same way.
Without a build they do not exist (:func:`native` answers None) and their callers keep to
the Python code they would otherwise replace.
"""
from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Sequence

from .cache import CacheWarning, _trusted, cache_dir
from .errors import UserError

__all__ = ["ALL", "ENV_ACCEL", "MODULES", "NATIVE", "accel_dir", "build", "clean", "describe_loaded", "enabled",
           "install", "loaded", "native", "status"]

ENV_ACCEL = "CL_ACCEL"

#: The modules on the service's per-request path (importer, shape propagation, fast-path
#: prediction, Monte Carlo aggregation, layer counts, response building).
MODULES: tuple[str, ...] = ("estimator.layers", "estimator.onnx_shapes", "estimator.onnx_import",
                            "estimator.aggregate", "estimator.fastpath", "estimator.predict", "service.server")

#: Modules that exist only compiled, from a ``.pyx`` source beside the package's ``.py``
#: files: the typed ONNX import core (estimator.native_import), which the importer uses
#: when it is built (see :func:`native`).
NATIVE: tuple[str, ...] = ("estimator.native_import",)
#: Everything ``estimator accel build`` compiles.
ALL: tuple[str, ...] = MODULES + NATIVE

_SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]  # e.g. .cpython-311-x86_64-linux-gnu.so


def accel_dir(root: Path | None = None) -> Path:
    """Where compiled modules live: ``<cache dir>/accel``."""
    return (root or cache_dir()) / "accel"


def enabled() -> bool:
    """False when ``CL_ACCEL=0`` (or false/no/off): pure Python everywhere."""
    return os.environ.get(ENV_ACCEL, "1").strip().lower() not in ("0", "false", "no", "off")


def _source(name: str, path: Any = None) -> Path | None:
    """The ``.py`` file the normal import system would load for ``name`` (``path``: the
    parent package's ``__path__``, as the import system passes it; looked up when None);
    for a module of :data:`NATIVE`, its ``.pyx`` file in the package directory."""
    if path is None:
        spec = importlib.util.find_spec(name.rpartition(".")[0])
        path = spec.submodule_search_locations if spec is not None else None
    if name in NATIVE:
        base = name.rpartition(".")[2]
        found = [Path(d) / f"{base}.pyx" for d in (path or ())]
        return next((f for f in found if f.is_file()), None)
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    origin = getattr(spec, "origin", None)
    return Path(origin) if origin and origin.endswith(".py") else None


def _digest(source: Path) -> str:
    return hashlib.sha256(source.read_bytes()).hexdigest()[:32]


def compiled_path(name: str, source: Path, root: Path | None = None) -> Path:
    """The compiled file that belongs to ``source`` as it is now."""
    return accel_dir(root) / f"{name.rpartition('.')[2]}-{_digest(source)}{_SUFFIX}"


class _Finder(importlib.abc.MetaPathFinder):
    """Loads a module of :data:`ALL` from its compiled file when one matches its source."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if (fullname not in MODULES and fullname not in NATIVE) or not enabled():
            return None
        try:
            src = _source(fullname, path)
            so = compiled_path(fullname, src) if src is not None else None
            if so is None or not so.is_file():
                return None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CacheWarning)  # (status reports untrusted files)
                if not _trusted(so):
                    return None
        except OSError:
            return None
        return importlib.util.spec_from_file_location(
            fullname, so, loader=importlib.machinery.ExtensionFileLoader(fullname, str(so)))


_FINDER = _Finder()


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (idempotent; :mod:`estimator` calls it)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def loaded() -> list[str]:
    """The modules of :data:`ALL` imported from a compiled file in this process."""
    return [m for m in ALL if str(getattr(sys.modules.get(m), "__file__", "")).endswith(_SUFFIX)]


#: name -> the loaded native module, or None when it is not built (looked up once per process)
_native: dict[str, Any] = {}


def native(name: str) -> Any:
    """The module ``name`` of :data:`NATIVE` when it is built for its current source (and
    compiled modules are enabled), else None; the answer is kept for the process."""
    if name not in NATIVE:
        raise ValueError(f"not a native module: {name} (known: {', '.join(NATIVE)})")
    try:
        return _native[name]
    except KeyError:
        pass
    mod = None
    if enabled():
        try:
            mod = importlib.import_module(name)
        except ImportError:  # not built (or built for another source version)
            mod = None
    _native[name] = mod
    return mod


def status(root: Path | None = None) -> list[dict[str, str]]:
    """Per module: ``compiled`` (a file matches the current source), ``stale`` (only files
    of another source version), ``untrusted`` or ``missing``; and whether it is loaded."""
    out = []
    done = set(loaded())
    for name in ALL:
        src = _source(name)
        row = {"module": name, "source": str(src or ""), "file": "", "loaded": "yes" if name in done else "no"}
        if src is None:
            row["state"] = "no source"
        else:
            so = compiled_path(name, src, root)
            base = name.rpartition(".")[2]
            others = sorted(accel_dir(root).glob(f"{base}-*{_SUFFIX}")) if accel_dir(root).is_dir() else []
            if so.is_file():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", CacheWarning)
                    row["state"] = "compiled" if _trusted(so) else "untrusted"
                row["file"] = str(so)
            else:
                row["state"] = "stale" if others else "missing"
        out.append(row)
    return out


def _cython() -> Any:
    try:
        from Cython.Build import cythonize  # noqa: PLC0415
    except ImportError:
        raise UserError("compiling needs Cython: pip install 'confident-latency[accel]' (and a C compiler)") from None
    return cythonize


def build(modules: Sequence[str] = ALL, *, root: Path | None = None, jobs: int | None = None,
          log: Any = None) -> list[Path]:
    """Compile ``modules`` (their current sources) into :func:`accel_dir`; drop the files of
    older source versions. Returns the compiled files. Raises :class:`UserError` without
    Cython or when the C compiler fails."""
    unknown = [m for m in modules if m not in ALL]
    if unknown:
        raise UserError(f"not an accelerated module: {', '.join(unknown)} (known: {', '.join(ALL)})")
    cythonize = _cython()
    from setuptools import Distribution, Extension  # noqa: PLC0415
    from setuptools.command.build_ext import build_ext  # noqa: PLC0415

    say = log or (lambda msg: None)
    dest = accel_dir(root)
    dest.mkdir(parents=True, exist_ok=True, mode=0o700)
    out: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="cl-accel-") as tmp:
        work = Path(tmp)
        exts, targets = [], {}
        for name in modules:
            src = _source(name)
            if src is None:
                raise UserError(f"{name}: no Python source found to compile")
            pkg, _, base = name.rpartition(".")
            d = work / "src" / pkg
            d.mkdir(parents=True, exist_ok=True)
            (d / "__init__.py").touch()
            copy = d / f"{base}{src.suffix}"  # (.py, or .pyx for a native module)
            shutil.copyfile(src, copy)  # the exact bytes whose digest names the result
            exts.append(Extension(name, [str(copy)]))
            targets[name] = compiled_path(name, src, root)
        say(f"cythonizing {len(exts)} module(s): {', '.join(modules)}")
        cwd = os.getcwd()
        try:
            os.chdir(work / "src")  # (Cython names each module from its package path)
            # The .py modules keep Python's semantics: their annotations are documentation,
            # not C types (with annotation typing, ``grace: float`` rejects an int). The
            # native modules' types are their cdef declarations.
            py_exts = [e for e in exts if e.name not in NATIVE]
            nat_exts = [e for e in exts if e.name in NATIVE]
            n_threads = jobs or (os.cpu_count() or 1)
            ext_modules = []
            if py_exts:
                ext_modules += cythonize(py_exts, compiler_directives={"language_level": 3, "annotation_typing": False},
                                         quiet=True, nthreads=n_threads)
            if nat_exts:
                ext_modules += cythonize(nat_exts, compiler_directives={"language_level": 3}, quiet=True,
                                         nthreads=n_threads)
            dist = Distribution({"name": "cl-accel", "ext_modules": ext_modules})
            cmd = build_ext(dist)
            cmd.build_lib = str(work / "lib")
            cmd.build_temp = str(work / "tmp")
            cmd.parallel = jobs or (os.cpu_count() or 1)
            cmd.ensure_finalized()
            say("compiling (C compiler; a few minutes for every module)")
            try:
                cmd.run()
            except Exception as e:  # distutils' CompileError / LinkError, a missing compiler
                raise UserError(f"compiling the accelerated modules failed: {type(e).__name__}: {e}") from None
        finally:
            os.chdir(cwd)
        for name, target in targets.items():
            pkg, _, base = name.rpartition(".")
            built = work / "lib" / pkg / f"{base}{_SUFFIX}"
            for old in dest.glob(f"{base}-*{_SUFFIX}"):
                if old != target:
                    old.unlink()
            tmp_target = target.with_name(f".tmp-{target.name}")
            shutil.copyfile(built, tmp_target)
            os.chmod(tmp_target, 0o700)
            os.replace(tmp_target, target)  # (a crash never leaves half a file under a valid name)
            out.append(target)
            say(f"{name} -> {target}")
    return out


def clean(root: Path | None = None) -> list[Path]:
    """Remove every compiled module; the next import is pure Python."""
    d = accel_dir(root)
    gone = sorted(d.glob(f"*{_SUFFIX}")) if d.is_dir() else []
    for p in gone:
        p.unlink()
    return gone


def describe_loaded() -> str:
    """One line for logs and reports: which hot modules run compiled."""
    names = loaded()
    if not names:
        return "pure Python (no compiled modules loaded; see 'estimator accel status')"
    return f"compiled: {len(names)}/{len(ALL)} hot modules ({', '.join(n.rpartition('.')[2] for n in names)})"
