"""The runner interface: prepare a model, time it, describe the environment.

Every target (local ONNX Runtime, LiteRT on host or board, the Vela cost model, TensorRT,
a remote bench agent) implements :class:`Runner`. ``bench`` never talks to a target in any
other way, so adding a target means adding one module here and one line in ``RUNNERS``.
"""
from __future__ import annotations

import importlib
import os
import platform
import statistics
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar, Sequence

__all__ = ["Runner", "Prepared", "Timing", "RunnerError", "RUNNERS", "get_runner", "timing_from_runs", "cpu_model",
           "host_info", "CacheFlush", "COLD_POLICIES"]


class RunnerError(RuntimeError):
    """A runner could not prepare or time a model (message says why, precisely)."""


@dataclass
class Prepared:
    """A model made ready to run on the target (session, interpreter, engine, handle)."""

    handle: Any
    model_format: str  # "onnx" | "tflite"
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Timing:
    """Statistics of one measurement, all in milliseconds.

    ``median_ms`` is the value models are trained on; ``p10_ms``/``p90_ms`` and ``mad_ms``
    describe dispersion; ``n`` is the number of timed runs (1 for cost models).
    """

    median_ms: float
    p10_ms: float
    p90_ms: float
    mad_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    n: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def timing_from_runs(runs_ms: Sequence[float]) -> Timing:
    """Summarise the per-run times of one measurement."""
    if not runs_ms:
        raise RunnerError("no timed runs")
    med = statistics.median(runs_ms)
    mad = statistics.median(abs(x - med) for x in runs_ms)
    return Timing(
        median_ms=med,
        p10_ms=_quantile(runs_ms, 0.10),
        p90_ms=_quantile(runs_ms, 0.90),
        mad_ms=mad,
        mean_ms=statistics.fmean(runs_ms),
        std_ms=statistics.pstdev(runs_ms) if len(runs_ms) > 1 else 0.0,
        min_ms=min(runs_ms),
        n=len(runs_ms),
    )


def cpu_model() -> str:
    """The CPU model from /proc/cpuinfo (Linux; "Hardware"/"Model" on ARM boards), else
    ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key.strip() in ("model name", "Hardware", "Model", "cpu model") and val.strip():
                    return val.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_info() -> dict[str, Any]:
    """The machine a runner runs on (stable across runs: part of the environment record)."""
    try:
        affinity: list[int] | None = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        affinity = None
    return {
        "hostname": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "affinity": affinity,
        "python": platform.python_version(),
    }


#: ``cold`` (with a cache flush) -> which models run with cold caches.
COLD_POLICIES = {"all": "every model", "weight-bound": "models whose weights outweigh their activations"}


class CacheFlush:
    """Cold caches for a host runner (``bench run --flush-cache MB --cold POLICY``).

    Before every run (warm-up and timed, outside the timed region) of a model that runs
    cold, an ``mb`` MiB buffer is written, evicting the model's weights from the last-level
    cache. A benchmark model is small and, run back to back, keeps its weights in cache;
    inside a real network they come from DRAM, because the network's own activations evict
    them between two inferences. ``policy`` says which models run cold: ``all``, or
    ``weight-bound``: models whose weights outweigh their activations (classifier heads,
    squeeze-excite and wide 1x1 convolutions on small maps), whose time is their weights'
    trip from memory. Flushing before a compute-bound layer also evicts its input, which a
    network has just written and so holds in cache: flushing every layer over-predicted every
    network (session 7), flushing only the weight-bound ones is the closer protocol.
    ``mb`` 0 is off. Both are part of the runner's environment when on (:meth:`environment`).
    """

    def __init__(self, mb: Any = 0.0, policy: str = "all") -> None:
        try:
            self.mb = float(mb)
        except (TypeError, ValueError):
            raise RunnerError(f"flush_cache_mb must be a number of MiB, got {mb!r}") from None
        if not (0.0 <= self.mb <= 4096.0):
            raise RunnerError(f"flush_cache_mb must be in [0, 4096] MiB, got {mb!r}")
        if policy not in COLD_POLICIES:
            raise RunnerError(f"cold {policy!r} unknown; use one of {', '.join(COLD_POLICIES)}")
        if policy != "all" and not self.mb:
            raise RunnerError(f"cold {policy!r} says which models run with cold caches: it needs flush_cache_mb "
                              f"(bench --flush-cache MB)")
        self.policy = policy
        n = int(self.mb * (1 << 20)) // 8
        self.buffer = _np().zeros(n) if n else None

    def runs_cold(self, weight_bound: Callable[[], bool]) -> bool:
        """Whether a model runs cold; ``weight_bound()`` is asked only under that policy."""
        if self.buffer is None:
            return False
        return self.policy == "all" or bool(weight_bound())

    def evict(self) -> None:
        """Write the buffer (call before a run of a model that runs cold)."""
        if self.buffer is not None:
            self.buffer += 1.0

    def environment(self) -> dict[str, Any]:
        """The environment keys, only when on (warm and flush-all environments keep their identity)."""
        env: dict[str, Any] = {}
        if self.mb:
            env["flush_cache_mb"] = self.mb
        if self.policy != "all":
            env["cold"] = f"{self.policy}: {COLD_POLICIES[self.policy]}"
        return env


def _np() -> Any:
    import numpy

    return numpy


class Runner(ABC):
    """A target that times models.

    Subclasses set ``name``, ``model_format`` (what :meth:`prepare` accepts) and
    ``provenance`` ("measured" for real hardware, "estimated" for cost models).
    """

    name: ClassVar[str]
    model_format: ClassVar[str] = "onnx"
    provenance: ClassVar[str] = "measured"

    @abstractmethod
    def prepare(self, model: bytes) -> Prepared:
        """Load/compile serialized model bytes for timing. Raise :class:`RunnerError`."""

    @abstractmethod
    def time(self, prepared: Prepared, *, warmup: int, runs: int) -> Timing:
        """Run ``warmup`` untimed then ``runs`` timed inferences; return their statistics."""

    @abstractmethod
    def environment(self) -> dict[str, Any]:
        """Runner name, library versions, host, threads/affinity, precision, provenance."""

    def per_layer(self, prepared: Prepared) -> dict[str, float]:
        """Per-node times (ms) from the target's own profiler, when it has one."""
        raise RunnerError(f"runner {self.name!r} has no per-layer profiler")

    def close(self) -> None:  # pragma: no cover - default no-op
        pass

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: name -> "module:Class". Modules are imported lazily so optional extras stay optional.
RUNNERS: dict[str, str] = {
    "onnxruntime": "bench.runners.onnxruntime_runner:OnnxRuntimeRunner",
    "litert": "bench.runners.litert_runner:LiteRTRunner",
    "vela": "bench.runners.vela_runner:VelaRunner",
    "tensorrt": "bench.runners.tensorrt_runner:TensorRTRunner",
    "agent": "bench.runners.agent_runner:AgentRunner",
}


def get_runner(name: str, **options: Any) -> Runner:
    """Instantiate a runner by name with runner-specific options."""
    try:
        target = RUNNERS[name]
    except KeyError:
        raise RunnerError(f"unknown runner {name!r}; known: {', '.join(RUNNERS)}") from None
    mod_name, cls_name = target.split(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise RunnerError(f"runner {name!r} is not available here: {e}") from e
    return getattr(mod, cls_name)(**options)
