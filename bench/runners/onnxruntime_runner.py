"""ONNX Runtime on the local CPU: the default runner.

Sessions use the CPU execution provider with explicit intra-/inter-op thread counts and
sequential execution, so a measurement depends on the model and these settings only.
An optional CPU affinity pins the whole process (``os.sched_setaffinity``) before any
session (and so any ORT thread) exists; it is recorded in :meth:`environment`.

More than one thread (``threads > 1``). ORT's worker threads spin for a while after a run
returns, waiting for the next one. A benchmark keeps many sessions alive and times them one
after another, so the workers of the sessions just timed spin beside the one being timed. With
more than one thread the workers stop spinning when a run returns
(``session.force_spinning_stop``; inside a run they still spin between operators, as in
deployment); this is part of :meth:`environment`. One thread does not spin at all.
Measured (2-vCPU AMD VM, ONNX Runtime 1.32, 2 threads; 60 sessions of 6 zoo
models alive, 3 rounds of batches of 20 runs, 3 processes per setting, alternating): the share
of batches 25 % or more slower than a single long-lived session was 0.71, 0.72 and 0.02 with
spinning, 0.45, 0.45 and 0.11 with it stopped; MobileNetV2's median 6.6 and 4.1-4.9 ms (one
long-lived session: 3.8 ms). Pinning the caller and the worker to one CPU each
(``session.intra_op_thread_affinities``) gave 0.42, 0.29 and 0.13: no clear gain, not used.
Stopping the spin lowers but does not remove the slow batches: on this VM type the rest came
and went in periods of minutes, whatever the setting (the third process of every setting).

Timing: ``warmup`` untimed runs, then ``runs`` runs each timed with
``time.perf_counter_ns`` around ``InferenceSession.run`` (the same Python-side overhead
for every model, so it cancels in Eq. 4 differences), summarised by
:func:`~bench.runners.base.timing_from_runs`.

Cold caches (``flush_cache_mb``, ``bench run --flush-cache MB``):
:class:`~bench.runners.base.CacheFlush`. On this VM (32 MiB L3) a 1280x1000 fully
connected layer takes 0.08 ms warm, 0.28-0.59 ms after a 64 MiB flush and 0.32-0.40 ms
inside MobileNetV2 (``tests/perf/cold_cache.py``).

:meth:`per_layer` is ORT's own profiler: a separate session with ``enable_profiling``,
the same warm-up and runs, and per node the median ``*_kernel_time`` duration in ms keyed
by node name. Note that graph optimisation renames fused nodes (the NCHWc transformer
names a node after its output tensor plus ``_nchwc``; activation fusions keep the conv's
name), which :func:`bench.smartpad.lum_profile_ms` accounts for.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from .base import CacheFlush, Prepared, Runner, RunnerError, Timing, cpu_model, timing_from_runs

__all__ = ["OnnxRuntimeRunner", "IGNORED_OPTIONS", "parse_affinity"]

#: Options of other runners that ``bench run`` may pass through; this runner accepts and
#: ignores them (with a warning), so one command line can be reused across runners.
#: ``precision`` is accepted too but only ``"fp32"`` is supported.
IGNORED_OPTIONS = frozenset({"agent", "token", "delegate", "accelerator_config", "system_config", "memory_mode"})

_OPT_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
               "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


def parse_affinity(affinity: str | Iterable[int] | None) -> tuple[int, ...] | None:
    """``"0-3,6"`` or an iterable of CPU ids -> sorted tuple; ``None`` -> ``None``."""
    if affinity is None or affinity == "":
        return None
    if isinstance(affinity, str):
        cpus: set[int] = set()
        for part in affinity.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                if "-" in part:
                    a, b = part.split("-", 1)
                    cpus.update(range(int(a), int(b) + 1))
                else:
                    cpus.add(int(part))
            except ValueError:
                raise RunnerError(f"bad CPU affinity {affinity!r}; use e.g. '0-3,6'") from None
        out = tuple(sorted(cpus))
    else:
        out = tuple(sorted({int(c) for c in affinity}))
    if not out or min(out) < 0:
        raise RunnerError(f"bad CPU affinity {affinity!r}; use e.g. '0-3,6'")
    return out


class OnnxRuntimeRunner(Runner):
    name = "onnxruntime"
    model_format = "onnx"
    provenance = "measured"

    def __init__(self, threads: int = 1, inter_op_threads: int = 1, graph_optimization: str = "all",
                 affinity: str | Iterable[int] | None = None, precision: str = "fp32", flush_cache_mb: float = 0.0,
                 **options: Any) -> None:
        try:
            import onnxruntime as ort
        except ImportError as e:  # pragma: no cover - a core dependency
            raise RunnerError(f"onnxruntime is not installed: {e}") from e
        self._ort = ort
        unknown = sorted(set(options) - IGNORED_OPTIONS)
        if unknown:
            raise RunnerError(f"runner 'onnxruntime' has no option(s) {', '.join(unknown)}")
        given = {k: v for k, v in options.items() if v is not None}
        if given:
            warnings.warn(f"runner 'onnxruntime' ignores option(s) {', '.join(sorted(given))}", stacklevel=2)
        self.ignored_options = given
        if precision != "fp32":
            raise RunnerError(f"runner 'onnxruntime' measures fp32 only, not {precision!r}")
        self.precision = precision
        if int(threads) < 1 or int(inter_op_threads) < 1:
            raise RunnerError(f"threads must be >= 1, got threads={threads}, inter_op_threads={inter_op_threads}")
        self.threads = int(threads)
        self.inter_op_threads = int(inter_op_threads)
        if graph_optimization not in _OPT_LEVELS:
            raise RunnerError(f"graph_optimization {graph_optimization!r} unknown; use one of {', '.join(_OPT_LEVELS)}")
        self.graph_optimization = graph_optimization
        self.affinity = parse_affinity(affinity)
        if self.affinity is not None:
            if not hasattr(os, "sched_setaffinity"):
                raise RunnerError("CPU affinity needs os.sched_setaffinity (Linux)")
            try:
                os.sched_setaffinity(0, self.affinity)
            except OSError as e:
                raise RunnerError(f"cannot pin to CPUs {list(self.affinity)}: {e}") from e
        self.flush = CacheFlush(flush_cache_mb)
        self._seed = 0

    # ------------------------------------------------------------------ sessions

    def _options(self, profile_prefix: str | None = None) -> Any:
        ort = self._ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = self.inter_op_threads
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _OPT_LEVELS[self.graph_optimization])
        so.log_severity_level = 3
        if self.threads == 1:
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        else:  # see the module docstring: no spinning beside the next session
            so.add_session_config_entry("session.force_spinning_stop", "1")
        if profile_prefix:
            so.enable_profiling = True
            so.profile_file_prefix = profile_prefix
        return so

    def _session(self, model: bytes, profile_prefix: str | None = None) -> Any:
        try:
            return self._ort.InferenceSession(model, self._options(profile_prefix), providers=["CPUExecutionProvider"])
        except Exception as e:  # ORT raises its own exception types
            raise RunnerError(f"onnxruntime could not load the model: {e}") from e

    def _feeds(self, sess: Any) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(self._seed)
        feeds = {}
        for i in sess.get_inputs():
            shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
            if i.type != "tensor(float)":
                raise RunnerError(f"input {i.name!r} has type {i.type}; only float32 inputs are supported")
            feeds[i.name] = rng.standard_normal(shape, dtype=np.float32)
        return feeds

    def prepare(self, model: bytes) -> Prepared:
        sess = self._session(model)
        return Prepared(sess, "onnx", {"feeds": self._feeds(sess), "model": model})

    def time(self, prepared: Prepared, *, warmup: int, runs: int) -> Timing:
        sess, feeds = prepared.handle, prepared.info["feeds"]
        run = sess.run
        evict = self.flush.evict
        try:
            for _ in range(max(0, warmup)):
                evict()
                run(None, feeds)
            times = []
            clock = time.perf_counter_ns
            for _ in range(max(1, runs)):
                evict()
                t0 = clock()
                run(None, feeds)
                times.append((clock() - t0) / 1e6)
        except RunnerError:
            raise
        except Exception as e:
            raise RunnerError(f"onnxruntime failed running the model: {e}") from e
        return timing_from_runs(times)

    def per_layer(self, prepared: Prepared, *, warmup: int = 3, runs: int = 10) -> dict[str, float]:
        """Median kernel time (ms) per node, from ORT's profiler, keyed by node name."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="ortprof") as d:
            sess = self._session(prepared.info["model"], profile_prefix=os.path.join(d, "p"))
            feeds = prepared.info["feeds"]
            evict = self.flush.evict
            for _ in range(max(0, warmup) + max(1, runs)):
                evict()
                sess.run(None, feeds)
            path = sess.end_profiling()
            events = json.loads(Path(path).read_text())
        per: dict[str, list[float]] = {}
        for e in events:
            name = e.get("name", "")
            if e.get("cat") == "Node" and name.endswith("_kernel_time"):
                per.setdefault(name[: -len("_kernel_time")], []).append(float(e["dur"]) / 1000.0)
        # the first (warm-up) occurrences are dropped; the rest are the timed runs
        out = {}
        for node, ds in per.items():
            timed = ds[max(0, warmup):] or ds
            out[node] = float(np.median(timed))
        return out

    # --------------------------------------------------------------- environment

    def environment(self) -> dict[str, Any]:
        try:  # recorded where installed; the runner itself needs only onnxruntime (a board's agent)
            import onnx
        except ImportError:
            onnx = None
        ort = self._ort
        aff = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        env: dict[str, Any] = {
            "runner": self.name,
            "provenance": self.provenance,
            "precision": self.precision,
            "versions": {
                "onnxruntime": ort.__version__,
                "numpy": np.__version__,
                "python": platform.python_version(),
                **({"onnx": onnx.__version__} if onnx is not None else {}),
            },
            "host": {
                "hostname": platform.node(),
                "os": f"{platform.system()} {platform.release()}",
                "machine": platform.machine(),
                "cpu_model": cpu_model(),
                "cpu_count": os.cpu_count(),
            },
            "device_name": f"{cpu_model()} (CPU)",
            "execution_provider": "CPUExecutionProvider",
            "threads": self.threads,
            "inter_op_threads": self.inter_op_threads,
            "execution_mode": "sequential",
            "graph_optimization": self.graph_optimization,
            "affinity_requested": list(self.affinity) if self.affinity is not None else None,
            "affinity": aff,
            "timer": "time.perf_counter_ns around InferenceSession.run",
            "ignored_options": sorted(self.ignored_options),
            "implementation": sys.implementation.name,
        }
        if self.threads > 1:  # only then: one-thread environments keep their identity
            env["spinning"] = "stopped when a run returns"
        env.update(self.flush.environment())
        return env
