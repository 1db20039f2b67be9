"""Device profiles: the plain-data description of one target, and the ONE loader.

A profile is a directory ``profiles/<name>/`` holding:

``profile.json``      metadata (schema below)
``measurements.csv``  the layer rows: the smart-padding benchmark (:mod:`estimator.dataset`)
``networks.csv``      optional network rows: whole networks measured on the target, with
``networks/``         the networks themselves (weightless ONNX, :mod:`estimator.onnx_strip`)

Nothing else in the directory is read; in particular no pickles. Models are trained
from ``measurements.csv`` and cached locally (:mod:`estimator.cache`); network rows
calibrate the network totals (:mod:`estimator.calibration`). A layer row that cannot be a
measurement (:func:`estimator.dataset.implausible`) is left out of training, and one line
names the file, its lines and why (:func:`estimator.dataset.excluded_message`): the training
report's ``excluded_rows``, every estimate's warnings, or a :class:`ProfileWarning`.

``profile.json`` schema (version 1)
-----------------------------------
.. code-block:: json

    {
      "schema": 1,
      "name": "host-cpu",                      // must equal the directory name
      "description": "free text (optional)",
      "hardware": "what was measured: CPU model, board, NPU ...",
      "runner": "onnxruntime",                 // bench runner that produced the data
      "precision": "fp32",                     // fp32 | fp16 | int8 | ...
      "threads": 1,                            // intra-op threads (null if n/a)
      "provenance": {
        "kind": "measured",                    // "measured" (hardware) | "estimated" (cost model)
        "source": "free text: exactly where the numbers came from",
        "host": "hostname / board the numbers were taken on",
        "versions": {"onnxruntime": "1.18.0", ...},
        "date": "2025-01-31"                   // ISO date (or date-time)
      },
      "fusion": { ... },                       // estimator.fusion.FusionRules.to_dict(), plus
                                               //   "detected": how `bench fusion` timed them (optional)
      "op_mapping": {                          // optional notes on how ops map to the target
        "cpu_fallback_ops": ["Resize"],        //   ops the target leaves on the CPU (flagged)
        "free_ops": ["Reshape", "Slice"],      //   ops the target turns into views: their layers
                                               //   are listed in free_nodes, not estimated
        "cpu_estimate": {"gops_per_s": 8, "gbytes_per_s": 2, "overhead_ms": 0.05, "factor": 4,
                         "source": "..."},     //   roofline of the CPU for layers it runs (unverified)
        "notes": "free text"
      },
      "training": {                            // optional estimator.models.TrainingOptions overrides
        "padding_split_by_type": {"fc": 0.95}  //   e.g. the pad-in conv's share of a type's padding
      },                                       //   (0.5 = Eq. 4 midpoint; tests/perf/padding_split.py --lum-types)
      "fingerprint": {"host": {...}, "runtime": {...}},  // optional: where the layer rows were
                                               //   measured (estimator.fingerprint)
      "calibration": {                         // required with networks.csv: where its rows come from
        "kind": "measured",                    //   "measured" | "estimated" (e.g. Vela's whole-network estimate)
        "source": "free text: exactly what measured the networks",
        "runner": "onnxruntime",               //   the runner that timed them ...
        "runner_options": {"threads": 2},      //   ... with these options
        "fingerprint": {...},                  //   the host and runtime they were timed on
        "base": "host-cpu",                    //   the profile whose layer rows this one copies (optional)
        "date": "2026-11-24T10:00:00+00:00"
      },
      "refined": {                             // optional: layer rows added by `bench refine`
        "base": "host-cpu",                    //   the profile whose layer rows come first
        "targets": [{"name": "onnx:resnet18", "sha256": "..."}],  // the networks refined toward
        "excluded": [{"name": ..., "sha256": ...}],  // held-out networks whose configurations were kept out
        "rounds": [{...}],                     //   per round: configurations measured, device seconds, widths
        "configurations": 42,                  //   layer rows added to the base's
        "device_seconds": 61.5,                //   measuring time of every round (killed runs' included)
        "runner": "onnxruntime", "runner_options": {...},
        "database": "bench-data/host-cpu-refine.sqlite",
        "date": "2026-11-24T10:00:00+00:00",
        "search": {...}                        //   optional, `nas search --refine`: study, every step's
      }                                        //   targets, rows and device seconds (nas.refine)
    }

Required: ``name``, ``hardware``, ``runner``, ``precision``, ``provenance.kind``,
``provenance.source`` and ``provenance.date``. Everything else is optional. Unknown
top-level keys are kept in :attr:`Profile.extra` (forward compatibility) but unknown keys
inside ``provenance``/``training`` are errors (typos there would silently change meaning).

Where profiles are found
------------------------
``load_profile(name)`` and ``list_profiles()`` search one root directory, the first of:

1. the ``root`` argument,
2. the ``CL_PROFILES`` environment variable,
3. ``<source checkout>/profiles`` (the directory next to the ``estimator`` package),
4. ``<sys.prefix>/share/confident-latency/profiles`` (an installed distribution's data files).

``load_profile`` also accepts a path to a profile directory or to its ``profile.json``.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Iterator, Mapping

from .dataset import COLUMNS, DatasetError, excluded_message, read_measurements, read_network_rows
from .errors import NotFoundError, UserError

__all__ = [
    "PROFILE_FILE",
    "MEASUREMENTS_FILE",
    "NETWORKS_FILE",
    "NETWORKS_DIR",
    "SCHEMA_VERSION",
    "ProfileError",
    "ProfileWarning",
    "Provenance",
    "Profile",
    "default_root",
    "list_profiles",
    "load_profile",
    "staged_profile",
    "read_network_set",
    "write_profile_json",
    "write_fusion",
]

PROFILE_FILE = "profile.json"
MEASUREMENTS_FILE = "measurements.csv"
NETWORKS_FILE = "networks.csv"
NETWORKS_DIR = "networks"
SCHEMA_VERSION = 1
ENV_ROOT = "CL_PROFILES"

_PROVENANCE_KINDS = ("measured", "estimated")
_TOP_KEYS = {"schema", "name", "description", "hardware", "runner", "precision", "threads", "provenance",
             "fusion", "op_mapping", "training", "fingerprint", "calibration", "refined"}
_PROV_KEYS = {"kind", "source", "host", "versions", "date", "measurement"}
_CAL_KEYS = {"kind", "source", "runner", "runner_options", "precision", "fingerprint", "base", "date"}
_REF_KEYS = {"base", "targets", "excluded", "rounds", "configurations", "device_seconds", "runner", "runner_options",
             "database", "date", "source", "search"}


class ProfileError(UserError):
    """A profile directory or its metadata is malformed (the message says where and how)."""


class ProfileWarning(UserWarning):
    """A profile loads, but some of its layer rows are left out (the message says which and why)."""


@dataclass(frozen=True)
class Provenance:
    kind: str  # "measured" | "estimated"
    source: str
    date: str
    host: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    #: how the rows were timed, from the bench environment (runs, warm-up, threads, affinity,
    #: graph optimisation, cache flushing, timer, ...); empty where the profile does not say
    measurement: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "source": self.source, "host": self.host,
               "versions": dict(self.versions), "date": self.date}
        if self.measurement:
            out["measurement"] = dict(self.measurement)
        return out

    def summary(self, limit: int = 240) -> str:
        """The source's first sentence (at most ``limit`` characters): what estimated or
        measured the numbers, for warnings that every estimate carries; the whole text is
        in ``profile.json`` (``estimator devices --json``)."""
        text = " ".join(self.source.split())
        end = text.find(". ")
        first = text if end < 0 else text[: end + 1]
        return first if len(first) <= limit else first[: limit - 3].rstrip() + "..."


@dataclass(frozen=True)
class Profile:
    """One device profile (metadata + the path of its benchmark table)."""

    name: str
    path: Path  # the profile directory
    hardware: str
    runner: str
    precision: str
    provenance: Provenance
    threads: int | None = None
    description: str = ""
    fusion: dict[str, Any] = field(default_factory=dict)
    op_mapping: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    #: where the layer rows were measured (:mod:`estimator.fingerprint`; empty if unrecorded)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    #: where the network rows were measured (empty without ``networks.csv``)
    calibration: dict[str, Any] = field(default_factory=dict)
    #: what ``bench refine`` added to the layer rows (empty if nothing)
    refined: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def measurements_path(self) -> Path:
        return self.path / MEASUREMENTS_FILE

    @property
    def networks_path(self) -> Path:
        return self.path / NETWORKS_FILE

    @property
    def has_networks(self) -> bool:
        return self.networks_path.is_file()

    def network_rows(self) -> list[dict[str, Any]]:
        """The network rows (:func:`read_network_set`), ``[]`` without ``networks.csv``."""
        return read_network_set(self.path) if self.has_networks else []

    def networks_hash(self) -> str:
        """SHA-256 of ``networks.csv`` ("" without one); the file names every network's digest."""
        if not self.has_networks:
            return ""
        return hashlib.sha256(self.networks_path.read_bytes()).hexdigest()

    @property
    def metadata_path(self) -> Path:
        return self.path / PROFILE_FILE

    def rows(self, excluded: list[tuple[int, str]] | None = None) -> Iterator[dict[str, Any]]:
        """The benchmark rows (parsed; see :mod:`estimator.dataset`) that can be measurements.

        The impossible ones (:func:`estimator.dataset.implausible`) are appended to
        ``excluded`` as ``(line, reason)``, for the caller to report; without a list, one
        :class:`ProfileWarning` names them once the rows are read through."""
        out: list[tuple[int, str]] = [] if excluded is None else excluded
        yield from read_measurements(self.measurements_path, out)
        if excluded is None and out:
            warnings.warn(excluded_message(self.measurements_path, out), ProfileWarning, stacklevel=2)

    def data_hash(self) -> str:
        """SHA-256 of the measurements file's bytes (part of the model cache key)."""
        h = hashlib.sha256()
        with self.measurements_path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()

    def fusion_rules(self) -> Any:
        """The profile's fusion rules as :class:`estimator.fusion.FusionRules`.

        Imported lazily so that loading a profile never depends on the ONNX front end.
        An empty ``fusion`` entry means the library default (``DEFAULT_FUSION``).
        """
        from . import fusion as _fusion  # noqa: PLC0415 (lazy on purpose)

        if not self.fusion:
            return _fusion.DEFAULT_FUSION
        try:
            return _fusion.FusionRules.from_dict(self.fusion)
        except UserError as e:
            raise ProfileError(f"{self.metadata_path}: fusion: {e}") from e
        except (TypeError, ValueError, KeyError) as e:
            raise ProfileError(f"{self.metadata_path}: fusion: {type(e).__name__}: {e}") from e

    @property
    def cpu_fallback_ops(self) -> list[str]:
        return list(self.op_mapping.get("cpu_fallback_ops", []))

    @property
    def conditional_cpu_ops(self) -> dict[str, str]:
        """ONNX ops the target runs on the CPU for some attributes only (op -> the rule):
        ``op_mapping.conditional_cpu_ops``; estimates flag them ``cpu_fallback_possible``."""
        return {str(k): str(v) for k, v in (self.op_mapping.get("conditional_cpu_ops") or {}).items()}

    @property
    def cpu_estimate(self) -> dict[str, Any] | None:
        """How layers the target leaves on its CPU are estimated where no CPU row measured
        them (``op_mapping.cpu_estimate``: ``gops_per_s``, ``gbytes_per_s``, ``overhead_ms``,
        ``factor``, ``source``), or None: :meth:`estimator.predict.Estimator.cpu_layers`."""
        est = self.op_mapping.get("cpu_estimate")
        return dict(est) if isinstance(est, dict) else None

    @property
    def free_ops(self) -> list[str]:
        """ONNX ops the target executes as views (no time): ``op_mapping.free_ops``. The
        estimator lists such layers in ``free_nodes`` with the reason instead of estimating
        them (:meth:`estimator.predict.Estimator.estimate_network`)."""
        return list(self.op_mapping.get("free_ops", []))

    def to_dict(self) -> dict[str, Any]:
        """The metadata as written in ``profile.json`` (plus nothing derived)."""
        d: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "name": self.name,
            "description": self.description,
            "hardware": self.hardware,
            "runner": self.runner,
            "precision": self.precision,
            "threads": self.threads,
            "provenance": self.provenance.to_dict(),
            "fusion": dict(self.fusion),
            "op_mapping": dict(self.op_mapping),
            "training": dict(self.training),
        }
        if self.fingerprint:
            d["fingerprint"] = dict(self.fingerprint)
        if self.calibration:
            d["calibration"] = dict(self.calibration)
        if self.refined:
            d["refined"] = dict(self.refined)
        d.update(self.extra)
        return d

    def summary(self) -> dict[str, Any]:
        """A short description for listings (``estimator devices``, ``ListDevices``)."""
        return {
            "name": self.name,
            "hardware": self.hardware,
            "runner": self.runner,
            "precision": self.precision,
            "threads": self.threads,
            "provenance": self.provenance.to_dict(),
            "calibration": self.calibration_summary(),
            "refined": self.refinement_summary(),
            "path": str(self.path),
        }

    def recorded_fingerprint(self) -> dict[str, Any]:
        """Where the layer rows were measured: ``fingerprint``, or for profiles written
        before fingerprints existed, what their provenance recorded (``host`` as
        ``key=value`` pairs, ``versions``)."""
        if self.fingerprint:
            return dict(self.fingerprint)
        host: dict[str, Any] = {}
        for part in self.provenance.host.split(","):
            k, sep, v = part.strip().partition("=")
            if sep and k in ("cpu_model", "cpu_count", "machine", "os"):
                host[k] = int(v) if k == "cpu_count" and v.isdigit() else v
        runtime = {"runner": self.runner, "versions": dict(self.provenance.versions)}
        if self.threads is not None:
            runtime["threads"] = self.threads
        return {"host": host, "runtime": runtime} if host or self.provenance.versions else {}

    def calibration_summary(self) -> dict[str, Any]:
        """What the network rows are (for listings): how many, measured by what, when."""
        if not self.has_networks:
            return {"networks": 0}
        c = self.calibration
        try:
            n = sum(1 for _ in self.networks_path.open("rb")) - 1  # (a listing: bytes, never decoded)
        except OSError:
            n = 0
        return {"networks": max(n, 0), "kind": c.get("kind", ""), "runner": c.get("runner", ""),
                "runner_options": dict(c.get("runner_options") or {}), "source": c.get("source", ""),
                "date": c.get("date", ""), "base": c.get("base", "")}

    def refinement_summary(self) -> dict[str, Any]:
        """What ``bench refine`` added to the layer rows (for listings): how many rows, toward
        which networks, in how many rounds and device seconds, by what, when;
        ``{"configurations": 0}`` for a profile that was not refined."""
        r = self.refined
        if not r:
            return {"configurations": 0}
        names = (lambda key: [str(t.get("name", "")) if isinstance(t, Mapping) else str(t) for t in r.get(key) or []])
        rounds = [x for x in r.get("rounds") or [] if not isinstance(x, Mapping) or x.get("round", 1) != 0]
        return {"configurations": int(r.get("configurations") or 0), "base": r.get("base", ""),
                "targets": names("targets"), "excluded": names("excluded"), "rounds": len(rounds),
                "device_seconds": float(r.get("device_seconds") or 0.0), "runner": r.get("runner", ""),
                "runner_options": dict(r.get("runner_options") or {}), "source": r.get("source", ""),
                "date": r.get("date", "")}


# ----------------------------------------------------------------------------- roots


def _candidate_roots() -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    env = os.environ.get(ENV_ROOT)
    if env:
        out.append((f"${ENV_ROOT}", Path(env).expanduser()))
    out.append(("source checkout", Path(__file__).resolve().parent.parent / "profiles"))
    out.append(("installed data", Path(sys.prefix) / "share" / "confident-latency" / "profiles"))
    return out


def default_root() -> Path:
    """The profiles directory used when no root is given (see the module docstring).

    ``$CL_PROFILES`` wins when set (even if it does not exist yet: an explicit choice
    must not silently fall through to another directory).
    """
    cands = _candidate_roots()
    if os.environ.get(ENV_ROOT):
        return cands[0][1]
    for _, p in cands:
        if p.is_dir():
            return p
    return cands[0][1]


def _root(root: str | Path | None) -> Path:
    return Path(root).expanduser() if root is not None else default_root()


def list_profiles(root: str | Path | None = None) -> list[str]:
    """Names of the profiles under ``root`` (directories holding a ``profile.json``)."""
    r = _root(root)
    if not r.is_dir():
        return []
    return sorted(p.name for p in r.iterdir() if p.is_dir() and (p / PROFILE_FILE).is_file())


# --------------------------------------------------------------------------- parsing


def _req_str(d: Mapping[str, Any], key: str, where: str) -> str:
    if key not in d:
        raise ProfileError(f"{where}: missing required key {key!r}")
    v = d[key]
    if not isinstance(v, str) or not v.strip():
        raise ProfileError(f"{where}: {key!r} must be a non-empty string, got {v!r}")
    return v


def _opt_str(d: Mapping[str, Any], key: str, where: str) -> str:
    v = d.get(key, "")
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ProfileError(f"{where}: {key!r} must be a string, got {v!r}")
    return v


def _opt_dict(d: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    v = d.get(key, {})
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ProfileError(f"{where}: {key!r} must be an object, got {type(v).__name__}")
    return dict(v)


def _check_date(s: str, where: str) -> str:
    try:
        if "T" in s or " " in s:
            datetime.fromisoformat(s.replace("Z", "+00:00"))
        else:
            date.fromisoformat(s)
    except ValueError:
        raise ProfileError(f"{where}: 'date' must be an ISO date or date-time, got {s!r}") from None
    return s


def parse_profile_dict(meta: Any, path: Path, *, where: str | None = None) -> Profile:
    """Validate a ``profile.json`` object and build a :class:`Profile` rooted at ``path``."""
    where = where or str(path / PROFILE_FILE)
    if not isinstance(meta, dict):
        raise ProfileError(f"{where}: top level must be a JSON object, got {type(meta).__name__}")
    schema = meta.get("schema", SCHEMA_VERSION)
    if schema != SCHEMA_VERSION:
        raise ProfileError(f"{where}: unsupported schema {schema!r} (this version reads schema {SCHEMA_VERSION})")
    name = _req_str(meta, "name", where)
    if name != path.name:
        raise ProfileError(f"{where}: name {name!r} does not match the directory name {path.name!r}")
    hardware = _req_str(meta, "hardware", where)
    runner = _req_str(meta, "runner", where)
    precision = _req_str(meta, "precision", where)
    threads = meta.get("threads")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ProfileError(f"{where}: 'threads' must be a positive integer or null, got {threads!r}")

    if "provenance" not in meta:
        raise ProfileError(f"{where}: missing required key 'provenance'")
    prov = meta["provenance"]
    pw = f"{where}: provenance"
    if not isinstance(prov, dict):
        raise ProfileError(f"{pw} must be an object, got {type(prov).__name__}")
    unknown = sorted(set(prov) - _PROV_KEYS)
    if unknown:
        raise ProfileError(f"{pw}: unknown keys {unknown} (allowed: {sorted(_PROV_KEYS)})")
    kind = _req_str(prov, "kind", pw)
    if kind not in _PROVENANCE_KINDS:
        raise ProfileError(f"{pw}: 'kind' must be one of {list(_PROVENANCE_KINDS)}, got {kind!r}")
    versions = _opt_dict(prov, "versions", pw)
    bad = {k: v for k, v in versions.items() if not isinstance(v, str)}
    if bad:
        raise ProfileError(f"{pw}: 'versions' values must be strings, got {bad}")
    provenance = Provenance(kind=kind, source=_req_str(prov, "source", pw),
                            date=_check_date(_req_str(prov, "date", pw), pw),
                            host=_opt_str(prov, "host", pw), versions=versions,
                            measurement=_opt_dict(prov, "measurement", pw))

    training = _opt_dict(meta, "training", where)
    if training:
        from .models import TrainingOptions  # noqa: PLC0415 (avoid a cycle at import time)

        try:
            TrainingOptions.from_dict(training)
        except UserError as e:
            raise ProfileError(f"{where}: training: {e}") from e
    fusion = _opt_dict(meta, "fusion", where)
    if fusion:
        from .fusion import FusionRules  # noqa: PLC0415 (lazy: plain data until validated)

        try:
            FusionRules.from_dict(fusion)
        except UserError as e:
            raise ProfileError(f"{where}: fusion: {e}") from e
    op_mapping = _opt_dict(meta, "op_mapping", where)
    for key in ("cpu_fallback_ops", "free_ops"):
        ops = op_mapping.get(key, [])
        if not isinstance(ops, list) or not all(isinstance(x, str) and x for x in ops):
            raise ProfileError(f"{where}: op_mapping.{key} must be a list of ONNX op names, got {ops!r}")
    cpu_est = op_mapping.get("cpu_estimate")
    if cpu_est is not None:
        keys = ("gops_per_s", "gbytes_per_s", "overhead_ms", "factor")
        if not isinstance(cpu_est, dict) or not all(isinstance(cpu_est.get(k), (int, float)) and cpu_est[k] > 0
                                                    for k in keys) or cpu_est["factor"] <= 1:
            raise ProfileError(f"{where}: op_mapping.cpu_estimate needs positive numbers {', '.join(keys)} "
                               f"(factor > 1), got {cpu_est!r}")
    both = sorted(set(op_mapping.get("cpu_fallback_ops", [])) & set(op_mapping.get("free_ops", [])))
    if both:
        raise ProfileError(f"{where}: op_mapping lists {both} both as cpu_fallback_ops and as free_ops")

    fingerprint = _opt_dict(meta, "fingerprint", where)
    for key in fingerprint:
        if key not in ("host", "runtime") or not isinstance(fingerprint[key], dict):
            raise ProfileError(f"{where}: fingerprint holds objects 'host' and 'runtime', got {key!r}")
    calibration = _opt_dict(meta, "calibration", where)
    if calibration:
        cw = f"{where}: calibration"
        unknown = sorted(set(calibration) - _CAL_KEYS)
        if unknown:
            raise ProfileError(f"{cw}: unknown keys {unknown} (allowed: {sorted(_CAL_KEYS)})")
        if _req_str(calibration, "kind", cw) not in _PROVENANCE_KINDS:
            raise ProfileError(f"{cw}: 'kind' must be one of {list(_PROVENANCE_KINDS)}, got {calibration['kind']!r}")
        _req_str(calibration, "source", cw)
        _req_str(calibration, "runner", cw)
        _check_date(_req_str(calibration, "date", cw), cw)
        for key in ("runner_options", "fingerprint"):
            if not isinstance(calibration.get(key, {}), dict):
                raise ProfileError(f"{cw}: {key!r} must be an object")
        if not isinstance(calibration.get("precision", ""), str):
            raise ProfileError(f"{cw}: 'precision' must be a string")

    refined = _opt_dict(meta, "refined", where)
    if refined:
        rw = f"{where}: refined"
        unknown = sorted(set(refined) - _REF_KEYS)
        if unknown:
            raise ProfileError(f"{rw}: unknown keys {unknown} (allowed: {sorted(_REF_KEYS)})")
        _req_str(refined, "base", rw)
        _check_date(_req_str(refined, "date", rw), rw)
        for key in ("targets", "excluded", "rounds"):
            if not isinstance(refined.get(key, []), list):
                raise ProfileError(f"{rw}: {key!r} must be a list")

    return Profile(
        name=name,
        path=path,
        hardware=hardware,
        runner=runner,
        precision=precision,
        provenance=provenance,
        threads=threads,
        description=_opt_str(meta, "description", where),
        fusion=fusion,
        op_mapping=op_mapping,
        training=training,
        fingerprint=fingerprint,
        calibration=calibration,
        refined=refined,
        extra={k: v for k, v in meta.items() if k not in _TOP_KEYS},
    )


def _check_measurements_header(path: Path) -> None:
    if not path.is_file():
        raise ProfileError(f"{path.parent}: missing {MEASUREMENTS_FILE}")
    try:
        rows = read_measurements(path, [])
        next(rows, None)  # reads the header (and checks it) and the first possible row
    except DatasetError as e:
        raise ProfileError(str(e)) from e


def _resolve(name_or_path: str | Path, root: str | Path | None) -> Path:
    s = str(name_or_path)
    p = Path(s).expanduser()
    looks_like_path = os.sep in s or bool(os.altsep and os.altsep in s) or s.startswith(".") or p.is_absolute()
    if looks_like_path:
        if p.name == PROFILE_FILE:
            p = p.parent
        if not (p / PROFILE_FILE).is_file():
            raise NotFoundError(f"no device profile at {p} (expected {p / PROFILE_FILE})")
        return p
    r = _root(root)
    d = r / s
    if not (d / PROFILE_FILE).is_file():
        known = list_profiles(r)
        listing = ", ".join(known) if known else "none"
        raise NotFoundError(f"unknown device {s!r}; known devices in {r}: {listing}")
    return d


def load_profile(name_or_path: str | Path, root: str | Path | None = None) -> Profile:
    """Load a device profile by name (under ``root``) or from a directory path.

    Raises :class:`~estimator.errors.NotFoundError` for an unknown device (listing the
    known ones) and :class:`ProfileError` for malformed metadata or a bad benchmark table.
    """
    d = _resolve(name_or_path, root)
    meta_path = d / PROFILE_FILE
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ProfileError(f"{meta_path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from e
    except UnicodeDecodeError as e:
        raise ProfileError(f"{meta_path}: not UTF-8 ({e})") from e
    prof = parse_profile_dict(meta, d.resolve() if not d.is_absolute() else d)
    _check_measurements_header(prof.measurements_path)
    if prof.has_networks and not prof.calibration:
        raise ProfileError(f"{prof.metadata_path}: the profile has {NETWORKS_FILE} but no 'calibration' entry saying "
                           f"where its networks were measured")
    return prof


def read_network_set(directory: str | Path) -> list[dict[str, Any]]:
    """The network rows of ``directory/networks.csv`` (a profile or a ``bench networks``
    output), each with ``onnx_path``: its weightless ONNX file, checked to exist and to
    have the recorded SHA-256."""
    d = Path(directory)
    path = d / NETWORKS_FILE
    if not path.is_file():
        raise ProfileError(f"{d}: no {NETWORKS_FILE} (write one with `bench networks` or `bench calibrate`)")
    try:
        rows = read_network_rows(path)
    except DatasetError as e:
        raise ProfileError(str(e)) from e
    except UnicodeDecodeError as e:
        raise ProfileError(f"{path}: not a UTF-8 CSV file ({e})") from e
    for r in rows:
        p = (d / r["onnx"]).resolve()
        if not p.is_relative_to(d.resolve()):
            raise ProfileError(f"{path}: network {r['name']!r}: onnx path {r['onnx']!r} leaves {d}")
        if not p.is_file():
            raise ProfileError(f"{path}: network {r['name']!r}: missing {r['onnx']}")
        if r["onnx_sha256"] and hashlib.sha256(p.read_bytes()).hexdigest() != r["onnx_sha256"]:
            raise ProfileError(f"{path}: network {r['name']!r}: {r['onnx']} does not have the recorded SHA-256")
        r["onnx_path"] = p
    return rows


def write_profile_json(directory: str | Path, meta: Mapping[str, Any]) -> Profile:
    """Validate ``meta`` and write it as ``directory/profile.json`` (for ``bench``/tools).

    The directory's name must equal ``meta['name']``. Returns the parsed profile (the
    measurements file is not required to exist yet).
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    meta = dict(meta)
    meta.setdefault("schema", SCHEMA_VERSION)
    prof = parse_profile_dict(meta, d)
    tmp = d / (PROFILE_FILE + ".tmp")
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, d / PROFILE_FILE)
    return prof


def write_fusion(name_or_path: str | Path, fusion: Mapping[str, Any], root: str | Path | None = None) -> Profile:
    """Replace the ``fusion`` entry of an installed profile (by name under ``root``, or a
    path) with ``fusion`` (:meth:`estimator.fusion.FusionRules.to_dict` form, optionally with
    ``detected``), validated first; the rest of ``profile.json`` is kept. Returns the profile
    as loaded again."""
    prof = load_profile(name_or_path, root)
    meta = prof.to_dict()
    meta["fusion"] = dict(fusion)
    write_profile_json(prof.path, meta)
    return load_profile(prof.path)


#: what a profile's provenance keeps of how its rows were timed: the bench settings, and the
#: runner's environment (the rest of the environment is its host and versions)
MEASUREMENT_SETTINGS = ("protocol", "runs", "warmup", "model_format", "precision", "weights_seed", "flush_cache_mb")
MEASUREMENT_ENVIRONMENT = ("threads", "inter_op_threads", "affinity", "graph_optimization", "execution_mode",
                           "execution_provider", "delegate", "flush_cache_mb", "timer")


def meta_from_bench_provenance(name: str, provenance: Mapping[str, Any], *, source: str,
                               hardware: str | None = None, **extra: Any) -> dict[str, Any]:
    """``profile.json`` metadata from a ``bench export`` provenance sidecar.

    The sidecar lists the environments the rows were measured under; a profile must come
    from exactly one (one runner, one precision, one thread setting).
    """
    envs = provenance.get("environments") if isinstance(provenance, Mapping) else None
    if not envs:
        raise ProfileError("bench provenance has no 'environments'")
    if len(envs) != 1:
        raise ProfileError(f"bench provenance lists {len(envs)} environments; a profile holds one "
                           f"(export one env_id)")
    e = envs[0]
    env = e.get("environment", {})
    host = e.get("host") or env.get("host") or {}
    host_s = ", ".join(f"{k}={v}" for k, v in sorted(host.items())) if isinstance(host, Mapping) else str(host)
    created = str(e.get("created_at", ""))
    meta: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "name": name,
        "hardware": hardware or str(e.get("device_name") or env.get("device_name") or "unknown"),
        "runner": str(e.get("runner") or env.get("runner")),
        "precision": str(e.get("precision") or env.get("precision") or "fp32"),
        "threads": e.get("threads") or env.get("threads"),
        "provenance": {
            "kind": str(e.get("provenance") or env.get("provenance") or "measured"),
            "source": source,
            "host": host_s,
            "versions": {str(k): str(v) for k, v in (e.get("versions") or env.get("versions") or {}).items()},
            "date": created or date.today().isoformat(),
        },
    }
    settings = e.get("settings") if isinstance(e.get("settings"), Mapping) else {}
    measurement = {k: v for k, v in {**{k: settings.get(k) for k in MEASUREMENT_SETTINGS},
                                     **{k: env.get(k) for k in MEASUREMENT_ENVIRONMENT}}.items()
                   if v not in (None, "", [], {})}
    if measurement:
        meta["provenance"]["measurement"] = measurement
    meta.update(extra)
    return meta


def create_profile(root: str | Path, name: str, measurements_csv: str | Path, *, source: str,
                   provenance_json: str | Path | None = None, hardware: str | None = None,
                   **extra: Any) -> Profile:
    """Create ``root/name/`` from a ``bench export`` CSV (+ its provenance sidecar)."""
    import shutil  # noqa: PLC0415

    csv_path = Path(measurements_csv)
    side = Path(provenance_json) if provenance_json else Path(str(csv_path) + ".provenance.json")
    if not side.is_file():
        raise ProfileError(f"no provenance sidecar {side} (bench export writes one next to the CSV)")
    prov = json.loads(side.read_text(encoding="utf-8"))
    meta = meta_from_bench_provenance(name, prov, source=source, hardware=hardware, **extra)
    d = Path(root) / name
    prof = write_profile_json(d, meta)
    shutil.copyfile(csv_path, d / MEASUREMENTS_FILE)
    _check_measurements_header(d / MEASUREMENTS_FILE)
    return prof


# keep the column tuple importable from here for profile writers
MEASUREMENT_COLUMNS = COLUMNS


@contextmanager
def staged_profile(root: str | Path, name: str, tag: str) -> Iterator[Path]:
    """A directory to write profile ``name`` in, beside ``root/name``; when the block ends
    without an exception it replaces ``root/name`` by two renames in the same root (the
    profile there is the old one or the new one whole, never half of each), and the staging
    folder is removed either way. ``tag`` names the writer in the staging folder's name."""
    root = Path(root)
    dest = root / name
    tmp_root = root / f".{tag}-{name}-{os.getpid()}"
    shutil.rmtree(tmp_root, ignore_errors=True)
    tmp = tmp_root / name
    try:
        yield tmp
        if dest.exists():
            trash = root / f".replaced-{name}-{os.getpid()}"
            os.replace(dest, trash)
            os.replace(tmp, dest)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
