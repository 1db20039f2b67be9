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
from typing import Any, ClassVar, Sequence

__all__ = ["Runner", "Prepared", "Timing", "RunnerError", "RUNNERS", "get_runner", "timing_from_runs", "cpu_model",
           "host_info", "CacheFlush", "CACHE_KEYS"]


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


#: Keys of a runner's environment that say how caches are treated (:class:`CacheFlush`):
#: two environments that differ only in these measure the same machine and runtime.
CACHE_KEYS = frozenset({"flush_cache_mb"})


class CacheFlush:
    """Cold caches for a host runner (``bench run --flush-cache MB``).

    Before every run (warm-up and timed, outside the timed region) an ``mb`` MiB buffer is
    written, evicting the model's weights from the last-level cache. A benchmark model is
    small and, run back to back, keeps its weights in cache; inside a real network a layer
    whose weights are used once per inference (the classifier's fully connected layer) gets
    them from DRAM. Flushing also evicts the layer's input, which a network has just written
    and so holds in cache: measure the weight-bound types cold in an environment of their own
    (``bench run --layers fc,conv2d --flush-cache 64``) and add their weight-bound rows to the
    warm profile as cold rows (``bench profile --cold-from``).
    ``mb`` 0 is off; when on it is part of the runner's environment (:meth:`environment`),
    so warm and cold measurements never mix in one environment.
    """

    def __init__(self, mb: Any = 0.0) -> None:
        try:
            self.mb = float(mb)
        except (TypeError, ValueError):
            raise RunnerError(f"flush_cache_mb must be a number of MiB, got {mb!r}") from None
        if not (0.0 <= self.mb <= 4096.0):
            raise RunnerError(f"flush_cache_mb must be in [0, 4096] MiB, got {mb!r}")
        import numpy as np  # noqa: PLC0415 (the agent imports this module before it needs numpy)

        n = int(self.mb * (1 << 20)) // 8
        self.buffer = np.zeros(n) if n else None

    def evict(self) -> None:
        """Write the buffer (a no-op when off); call before every run."""
        if self.buffer is not None:
            self.buffer += 1.0

    def environment(self) -> dict[str, Any]:
        """The environment key, only when on (warm environments keep their identity)."""
        return {"flush_cache_mb": self.mb} if self.mb else {}



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
