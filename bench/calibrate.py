"""Calibrating a profile to a target: measure whole networks there, write the calibrated profile.

The library behind ``bench calibrate`` and ``nas search --calibrate`` (the CLI is
:mod:`bench.cmd_calibrate`): :func:`measure` times networks on a runner through the one
whole-network path (:mod:`bench.network_measure`, durable and resumable), and
:func:`write_calibrated_profile` writes profile NEW: the base profile's layer rows unchanged,
the network rows (``networks.csv`` + ``networks/``), and where they were measured
(``profile.json`` ``calibration``: runner, options, host and runtime fingerprint, date). NEW
is written in a temporary directory, loaded and calibrated there
(:mod:`estimator.calibration`), and only then moved into place: whole, or not at all.
"""
from __future__ import annotations

import importlib
import inspect
import shutil
import statistics
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from estimator.errors import UserError

from .network_measure import DEFAULT_ROUNDS, DEFAULT_RUNS, DEFAULT_WARMUP
from .runners.base import RUNNERS, RunnerError

__all__ = ["DEFAULT_NETWORKS", "DEFAULT_SPACES", "Measured", "Calibrated", "runner_defaults", "precision_for",
           "measure", "write_calibrated_profile", "describe_sources", "bias"]


#: space samples measured when no source is given, round robin over three spaces: three
#: families let leave-family-out validation hold one out and still fit every layer type the
#: others share (estimator.calibration, ``per-type``); about 1.5 minutes of device time on a
#: 2-vCPU AMD EPYC VM at 1 thread (36 s for the 40 mobilenet and resnet samples, 60 s for
#: the 20 scaled ones), 2-3 minutes of wall time with building
DEFAULT_NETWORKS = 60
DEFAULT_SPACES = "mobilenet,resnet,scaled"


@dataclass
class Measured:
    results: list[Any]  # bench.network_measure.NetworkResult
    runner: str
    kind: str  # "measured" | "estimated"
    options: dict[str, Any]  # the runner's options as used (threads included)
    environment: dict[str, Any]
    seconds: float  # wall time of building, preparing and timing
    precision: str
    rounds: int
    runs: int
    warmup: int


@dataclass
class Calibrated:
    path: Path
    info: dict[str, Any]  # Estimator.calibration_info() of the new profile
    report: dict[str, Any] | None  # the calibration's fit report (None when not applied)


def _params(runner: str) -> set[str]:
    mod, cls = RUNNERS[runner].split(":")
    try:
        return set(inspect.signature(getattr(importlib.import_module(mod), cls).__init__).parameters)
    except (ImportError, AttributeError):
        return set()


def runner_defaults(runner: str, base: Any) -> dict[str, Any]:
    """Options taken from the base profile when the target runs its runner: its threads."""
    if base is not None and runner == base.runner and base.threads and "threads" in _params(runner):
        return {"threads": base.threads}
    return {}


def precision_for(runner_name: str, model_format: str, base: Any) -> str:
    """The precision a runner renders models in when it measures for profile ``base`` and no
    ``--precision`` is given: BASE's where the runner renders it (BASE's own runner always; the
    shipped fp32 ``host-cpu`` adapted or calibrated to LiteRT is measured in float32; a LiteRT
    fp32 profile is refined in float32, not with int8 rows beside its float32 ones), else the
    runner's own default (Vela int8; :func:`bench.smartpad.default_precision`)."""
    from .smartpad import TFLITE_QUANTIZATION, default_precision  # noqa: PLC0415

    if runner_name == "vela":
        return "int8"
    own = getattr(base, "precision", None)
    renders = runner_name == getattr(base, "runner", None) or (model_format == "tflite" and own in TFLITE_QUANTIZATION)
    if own and renders:
        return str(own)
    return default_precision(model_format)


def measure(name: str, runner: Any, specs: Sequence[Any], *, fusion: Any, db: str | Path,
            rounds: int = DEFAULT_ROUNDS, runs: int = DEFAULT_RUNS, warmup: int = DEFAULT_WARMUP,
            precision: str | None = None, options: dict[str, Any] | None = None,
            progress: bool = False, log: Callable[[str], None] | None = None,
            of_rounds: int | None = None, first_round: int = 0, warn_moved: bool = True,
            tick: Callable[[], None] | None = None) -> Measured:
    """Measure ``specs`` (:mod:`bench.network_sources`) whole on ``runner`` (a
    :class:`~bench.runners.base.Runner`, closed afterwards), committing every round to ``db``
    (converted models are kept beside it in ``<db>.models/``); ``log`` also gets
    :func:`bench.network_measure.moved_warning`'s warning. ``of_rounds`` (default ``rounds``):
    the rounds the database's environment is for, so that the first ``rounds`` of them
    measured now and all of them measured later are one set of rounds; ``first_round``: the
    rounds before it were measured then (not a resume). ``warn_moved=False``:
    the caller judges the rounds' spread itself (rounds spread over a window on purpose).
    ``tick``: called as the rounds go (:func:`bench.network_measure.measure_networks`)."""
    from .measure import bench_version, exclusive  # noqa: PLC0415
    from .network_measure import PROTOCOL, measure_networks, moved_warning  # noqa: PLC0415
    from .storage import Store  # noqa: PLC0415

    if not specs:
        raise UserError("no network to measure")
    try:
        precision = precision or precision_for(runner.name, runner.model_format, None)
        path = Path(db)
        settings = {"protocol": PROTOCOL, "warmup": warmup, "runs": runs, "rounds": of_rounds or rounds,
                    "model_format": runner.model_format, "precision": precision, "bench_version": bench_version()}
        if log is not None:
            log(f"{len(specs)} networks on {name} with {runner.name} -> {path}")
        env = runner.environment()
        with Store(path) as store, exclusive(path):
            env_id = store.environment_id(name, env, settings)
            t0 = time.monotonic()
            results = measure_networks(runner, store, env_id, specs, fusion=fusion, warmup=warmup, runs=runs,
                                       rounds=rounds, precision=precision, progress=progress, log=log,
                                       cache=path.with_name(path.name + ".models"), first_round=first_round,
                                       tick=tick)
            seconds = time.monotonic() - t0
        warning = moved_warning(results) if warn_moved else ""
        if warning and log is not None:
            log(f"warning: {warning}")
    except RunnerError as e:
        raise UserError(f"runner {runner.name!r}: {e}") from e
    finally:
        runner.close()
    opts = {k: v for k, v in dict(options or {}).items() if k != "token"}
    if "threads" not in opts and getattr(runner, "threads", None) is not None:
        opts["threads"] = runner.threads
    estimated = runner.provenance == "estimated"
    return Measured(results, runner.name, runner.provenance, opts, env, seconds, precision,
                    1 if estimated else rounds, 1 if estimated else runs, 0 if estimated else warmup)


def describe_sources(results: Sequence[Any]) -> str:
    """How many networks of each family (``results``: network results or specs)."""
    counts: dict[str, int] = {}
    for r in results:
        family = getattr(r, "spec", r).family
        counts[family] = counts.get(family, 0) + 1
    return ", ".join(f"{n} {f}" for f, n in sorted(counts.items()))


def _fmt_opts(opts: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(opts.items())) or "default options"


def target_description(m: Measured) -> str:
    if m.kind == "estimated":
        return f"{m.runner}'s whole-network estimate ({m.environment.get('device_name') or m.runner})"
    return f"{m.environment.get('device_name') or m.runner}, {m.runner} ({_fmt_opts(m.options)})"


def _target_fingerprint(m: Measured) -> dict[str, Any]:
    """Where the networks ran: this host for host runners, the runtime for a cost model, the
    agent's own report for a board."""
    from estimator import fingerprint as fp  # noqa: PLC0415

    threads = m.options.get("threads")
    if m.runner in fp.HOST_RUNNERS:
        return fp.fingerprint(m.runner, threads)
    if m.runner in fp.RUNTIME_PACKAGES:
        return {"runtime": fp.runtime_fingerprint(m.runner, threads)}
    host = m.environment.get("host") if isinstance(m.environment.get("host"), dict) else {}
    return {"host": dict(host), "runtime": {"runner": m.runner, "versions": dict(m.environment.get("versions") or {})}}


def bias(base: Any, results: Sequence[Any]) -> tuple[float, float, float, int]:
    """The base profile's uncalibrated bias on these networks: (median, min, max) of
    measured / predicted, and how many."""
    from estimator.predict import Estimator  # noqa: PLC0415

    est = Estimator.from_profile(base)
    ratios = []
    for r in results:
        p = est.estimate_network(r.spec.weightless_onnx, [0.9], per_layer=False, calibrate=False).total_ms
        if p > 0:
            ratios.append(r.measured_ms / p)
    if not ratios:
        raise UserError(f"{base.name} predicts 0 ms for every network measured")
    return statistics.median(ratios), min(ratios), max(ratios), len(ratios)


def write_calibrated_profile(base: Any, name: str, root: str | Path, m: Measured, *, replace: bool = False,
                             command: str = "bench calibrate", origin: str | None = None) -> Calibrated:
    """Write profile ``name`` under ``root`` (see the module docstring). ``origin``: the command
    line the provenance names (default ``command --device BASE``)."""
    from estimator.predict import Estimator  # noqa: PLC0415
    from estimator.profile import (MEASUREMENTS_FILE, NETWORKS_FILE, PROFILE_FILE, load_profile,  # noqa: PLC0415
                                   staged_profile, write_profile_json)

    from .network_measure import write_network_set  # noqa: PLC0415

    root = Path(root)
    dest = root / name
    if dest.exists() and not replace:
        raise UserError(f"profile {name!r} exists in {root}; give --replace to overwrite it (the base profile "
                        f"itself too: its layer rows stay, its network rows are replaced), or another --name")
    what = "estimated by" if m.kind == "estimated" else "measured on"
    calib = {
        "kind": m.kind,
        "source": (f"`{origin or f'{command} --device {base.name}'}`: {len(m.results)} whole networks "
                   f"({describe_sources(m.results)}) {what} {target_description(m)}, {m.precision}; {m.rounds} "
                   f"interleaved round(s) of {m.warmup} warm-up + {m.runs} timed runs, the median of the rounds' "
                   f"medians"),
        "runner": m.runner,
        "runner_options": dict(m.options),
        "precision": m.precision,
        "fingerprint": _target_fingerprint(m),
        "base": base.name,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    meta = base.to_dict()
    meta["name"] = name
    meta["calibration"] = calib
    if not meta.get("fingerprint"):
        recorded = base.recorded_fingerprint()
        if recorded:
            meta["fingerprint"] = recorded
    previous = (meta.get("description") or "").split(" Calibrated on ")[0]  # a recalibration replaces the note
    meta["description"] = (previous.rstrip() +
                           f" Calibrated on {len(m.results)} whole networks {what} {target_description(m)} "
                           f"(`{origin or f'{command} --device {base.name}'}`).").strip()
    with staged_profile(root, name, "calibrate") as tmp:
        write_profile_json(tmp, meta)
        shutil.copyfile(base.measurements_path, tmp / MEASUREMENTS_FILE)
        for side in base.path.iterdir():  # the layer data's side files (bench-provenance.json)
            if side.is_file() and side.name not in (PROFILE_FILE, MEASUREMENTS_FILE, NETWORKS_FILE):
                shutil.copyfile(side, tmp / side.name)
        write_network_set(tmp, m.results, runner=m.runner, kind=m.kind)
        new = Estimator.from_profile(load_profile(tmp))
        state = new.calibration_state()
        info, report = dict(state[1]), (state[0].report if state[0] is not None else None)
    return Calibrated(dest, info, report)
