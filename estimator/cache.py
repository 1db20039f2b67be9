"""The local model cache: the only place pickles are ever read from.

Three kinds of entry live under ``<cache dir>/<kind>/``, each named by ``<key>``, a SHA-256
over everything that determines its content (see :func:`cache_key`):

* ``models/<key>.npz``: a trained model set (:class:`estimator.models.DeviceModels`):
  what estimates evaluate (flattened forests, k-NN data, conformal scores, the model's
  numbers and report as JSON), plain arrays read with ``allow_pickle=False``
  (:func:`load_arrays`, :func:`store_arrays`). A warm start reads only this file and
  imports neither scikit-learn, crepes, pandas nor scipy. Its key covers the bytes of
  the profile's ``measurements.csv``; it names the type entries it was assembled from.
* ``types/<key>.npz`` and ``types/<key>.pkl``: one layer type's trained model, keyed by
  a hash of that type's training rows (and its hyperparameters), so that a profile whose
  rows changed for some types only (``bench refine``) retrains those and reuses the
  others. The ``.npz`` holds its arrays (as above), the ``.pkl`` its scikit-learn and
  crepes objects, read only when the reference path (``fast=False``) asks for them
  (:func:`load`, :func:`store`).
* ``grids/<key>.npz``: the out-of-bag hyperparameter grid search of one type, keyed by
  the rows it searched (:func:`estimator.models.grid_rows` says which).

The keys cover:

* the data: the bytes of ``measurements.csv`` (model sets), or the arrays of one type's
  training rows (type and grid entries),
* the training options and the training target (``lum`` or ``single``),
* :data:`estimator.models.MODEL_CODE_VERSION` (a hash of the training code's sources),
* the versions of Python, numpy, scikit-learn and crepes (from the installed packages'
  metadata, without importing them).

Cache directory: ``$CL_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/confident-latency``, else
``~/.cache/confident-latency``. It is created with mode 0700.

Safety rules (pickles execute code when loaded):

* :func:`load` takes a *key* and a kind, never a path; the file it opens is always
  ``<cache dir>/<kind>/<key>.pkl`` with ``key`` checked to be 64 hex digits and ``kind``
  one of :data:`KINDS`, so no pickle is loaded from a profile directory, the repository
  or anywhere else. Arrays are read with ``allow_pickle=False``.
* On POSIX, a cache file that is not owned by the current user, or is writable by group
  or others, is refused (treated as a miss and reported).
* Writes go to a temporary file in the same directory and are renamed into place, so a
  crash never leaves a half-written file under a valid key (a type's pickle is written
  before its arrays, and a model set after the type entries it names).
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import platform
import re
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any, Mapping

__all__ = ["ENV_CACHE", "KINDS", "cache_dir", "cache_key", "library_versions", "load", "store", "load_arrays", "store_arrays",
           "path_for", "CacheWarning"]

ENV_CACHE = "CL_CACHE_DIR"
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
#: entry kinds, one subdirectory each: model sets, per-type models, per-type grid searches
KINDS = ("models", "types", "grids")


class CacheWarning(UserWarning):
    pass


def cache_dir() -> Path:
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "confident-latency"


def _version(dist: str, module: str) -> str:
    """An installed package's version from its metadata (no import); its ``__version__`` where
    the metadata is missing."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version(dist)
    except PackageNotFoundError:  # pragma: no cover - metadata missing
        import importlib  # noqa: PLC0415

        return str(getattr(importlib.import_module(module), "__version__", "unknown"))


def library_versions() -> dict[str, str]:
    import numpy  # noqa: PLC0415

    return {
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "scikit-learn": _version("scikit-learn", "sklearn"),
        "crepes": _version("crepes", "crepes"),
    }


def cache_key(data_hash: str, options: Mapping[str, Any], code_version: str,
              versions: Mapping[str, str] | None = None) -> str:
    payload = {
        "data": data_hash,
        "options": dict(options),
        "code": code_version,
        "versions": dict(versions if versions is not None else library_versions()),
    }
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def path_for(key: str, root: Path | None = None, suffix: str = ".npz", kind: str = "models") -> Path:
    if not _KEY_RE.match(key):
        raise ValueError(f"invalid cache key {key!r}")
    if suffix not in (".pkl", ".npz"):
        raise ValueError(f"invalid cache file suffix {suffix!r}")
    if kind not in KINDS:
        raise ValueError(f"invalid cache entry kind {kind!r}")
    return (root or cache_dir()) / kind / f"{key}{suffix}"


def _trusted(p: Path) -> bool:
    if os.name != "posix":
        return True
    st = p.stat()
    if st.st_uid != os.getuid():
        warnings.warn(f"ignoring cache file {p}: not owned by the current user", CacheWarning, stacklevel=3)
        return False
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        warnings.warn(f"ignoring cache file {p}: writable by group/others", CacheWarning, stacklevel=3)
        return False
    return True


def load(key: str, root: Path | None = None, kind: str = "types") -> Any | None:
    """The cached object for ``key``, or None on a miss (or an unreadable/untrusted file)."""
    p = path_for(key, root, ".pkl", kind)
    if not p.is_file() or not _trusted(p):
        return None
    try:
        with p.open("rb") as f:
            obj = pickle.load(f)  # noqa: S301 - only from our own cache dir, see module docstring
    except Exception as e:  # a corrupt or incompatible entry is a miss, not a crash
        warnings.warn(f"ignoring unreadable cache file {p}: {type(e).__name__}: {e}", CacheWarning, stacklevel=2)
        return None
    if getattr(obj, "cache_key", key) != key:
        warnings.warn(f"ignoring cache file {p}: its content was written under another key", CacheWarning,
                      stacklevel=2)
        return None
    return obj


def load_arrays(key: str, root: Path | None = None, kind: str = "models") -> dict[str, Any] | None:
    """The arrays stored for ``key`` (name -> numpy array, read without unpickling), or None
    on a miss (or an unreadable/untrusted file)."""
    import numpy as np  # noqa: PLC0415

    p = path_for(key, root, ".npz", kind)
    if not p.is_file() or not _trusted(p):
        return None
    try:
        with np.load(p, allow_pickle=False) as z:
            return {name: z[name] for name in z.files}
    except Exception as e:  # a corrupt entry is a miss, not a crash
        warnings.warn(f"ignoring unreadable cache file {p}: {type(e).__name__}: {e}", CacheWarning, stacklevel=2)
        return None


def store_arrays(key: str, arrays: Mapping[str, Any], root: Path | None = None, kind: str = "models") -> Path:
    """Store ``arrays`` (name -> numpy array, none of dtype object) for ``key`` (uncompressed npz)."""
    import numpy as np  # noqa: PLC0415

    return _write(path_for(key, root, ".npz", kind), lambda f: np.savez(f, **arrays))


def store(key: str, obj: Any, root: Path | None = None, kind: str = "types") -> Path:
    return _write(path_for(key, root, ".pkl", kind), lambda f: pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL))


def _write(p: Path, write: Any) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=p.suffix, dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, 0o600)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p
