"""LiteRT (TensorFlow Lite) runner: the host CPU through ``ai_edge_litert``, or a board
through ``tflite_runtime`` (same Interpreter API), optionally with an external delegate
(Ethos-U on the i.MX93, the VX delegate on the i.MX8M Plus, ...).

Timing: the model's inputs are filled once with seeded random data of the input dtype
(int8/uint8 uniform over the type's range, float N(0, 1)); then ``warmup`` untimed and
``runs`` timed ``invoke()`` calls, each timed alone with ``time.perf_counter_ns`` (no input
copies inside the timed region). With ``use_xnnpack=True`` (the default, and what LiteRT
does unless told otherwise) float and int8 CPU kernels go through the XNNPACK delegate.

Cold caches (``flush_cache_mb``, ``bench run --flush-cache MB``):
:class:`~bench.runners.base.CacheFlush`, before every ``invoke()``.

A delegate may leave operators on the CPU; LiteRT's Python API cannot say which, so the
profile of a delegated target should be cross-checked with the delegate's own tooling (for
Ethos-U: the ``vela`` runner lists the CPU-placed operators).
"""
from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .base import CacheFlush, Prepared, Runner, RunnerError, Timing, host_info, timing_from_runs

__all__ = ["LiteRTRunner", "import_interpreter_module"]

#: Interpreter modules, in the order they are tried for ``runtime="auto"``.
RUNTIMES: tuple[str, ...] = ("ai_edge_litert", "tflite_runtime")

_TFLITE_IDENT = b"TFL3"


def import_interpreter_module(runtime: str = "auto") -> tuple[Any, str, str]:
    """``(interpreter module, runtime name, version)``; ``runtime`` is ``"auto"`` or one of
    :data:`RUNTIMES`. Raises :class:`RunnerError` when none is installed."""
    names = RUNTIMES if runtime == "auto" else (runtime,)
    if runtime != "auto" and runtime not in RUNTIMES:
        raise RunnerError(f"unknown LiteRT runtime {runtime!r}; use 'auto' or one of {', '.join(RUNTIMES)}")
    errors = []
    for name in names:
        try:
            mod = importlib.import_module(f"{name}.interpreter")
        except ImportError as e:
            errors.append(f"{name}: {e}")
            continue
        return mod, name, _version_of(name)
    raise RunnerError(
        "no LiteRT interpreter is installed (" + "; ".join(errors) + "). On a host: pip install "
        "'confident-latency[tflite]' (ai-edge-litert); on a board: the vendor's tflite_runtime")


def _version_of(name: str) -> str:
    try:
        mod = importlib.import_module(name)
        v = getattr(mod, "__version__", None)
        if v:
            return str(v)
    except ImportError:  # pragma: no cover
        pass
    from importlib import metadata

    for dist in (name.replace("_", "-"), name):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


#: numpy dtype name of a model's first input -> precision name used across runners.
_PRECISIONS = {"float32": "fp32", "float16": "fp16", "int8": "int8", "uint8": "uint8", "int16": "int16"}


def _precision(dtype: Any) -> str:
    name = np.dtype(dtype).name
    return _PRECISIONS.get(name, name)


def _random_input(rng: np.random.Generator, shape: Any, dtype: Any) -> np.ndarray:
    dt = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(dt)
    raise RunnerError(f"cannot feed a model input of dtype {dt}")


@dataclass
class _Session:
    interpreter: Any
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    model: bytes = field(repr=False)  # the interpreter reads from this buffer: keep it alive


class LiteRTRunner(Runner):
    """Times TFLite models with the LiteRT interpreter.

    Options: ``threads`` (interpreter threads), ``delegate`` (path of an external delegate
    library, e.g. ``/usr/lib/libethosu_delegate.so``), ``delegate_options`` (its string
    options), ``runtime`` (``"auto"``, ``"ai_edge_litert"`` or ``"tflite_runtime"``),
    ``use_xnnpack`` (apply LiteRT's default XNNPACK delegate; ignored with an external
    delegate's runtime that has none), ``seed`` (input data), ``flush_cache_mb`` (cold caches, above),
    ``precision`` (the
    precision the models are rendered in, ``"int8"`` or ``"fp32"``: when given, every
    model's input dtype must match it), ``vela`` (compile every model with Arm's Vela
    before loading it, :func:`bench.runners.vela_runner.vela_compile`: the i.MX93's Ethos-U
    delegate only runs Vela-compiled models and leaves any other model on the CPU).

    Precision: each prepared model's precision (from its first input's dtype: int8,
    uint8, fp32, ...) is in ``Prepared.info["precision"]``. :meth:`environment` reports the
    declared ``precision`` (``None`` when not declared), not the last model's, because the
    environment record must be the same before and after models were timed (``bench``
    resumes a run by matching it, also through a bench agent that has timed before).
    """

    name = "litert"
    model_format = "tflite"
    provenance = "measured"

    def __init__(self, threads: int = 1, delegate: str | None = None,
                 delegate_options: Mapping[str, Any] | None = None, runtime: str = "auto",
                 use_xnnpack: bool = True, seed: int = 0, precision: str | None = None,
                 vela: bool | str = False, flush_cache_mb: float = 0.0) -> None:
        try:
            threads = int(threads)
        except (TypeError, ValueError):
            raise RunnerError(f"threads must be an integer, got {threads!r}") from None
        if threads < 1:
            raise RunnerError(f"threads must be >= 1, got {threads}")
        self.threads = threads
        self.delegate = str(delegate) if delegate else None
        self.delegate_options = {str(k): str(v) for k, v in (delegate_options or {}).items()}
        self.use_xnnpack = bool(use_xnnpack)
        self.seed = int(seed)
        if precision is not None and precision not in _PRECISIONS.values():
            raise RunnerError(f"precision must be one of {', '.join(sorted(set(_PRECISIONS.values())))}, "
                              f"got {precision!r}")
        self.precision = precision
        if isinstance(vela, str):
            if vela.strip().lower() not in ("1", "0", "true", "false", "yes", "no", ""):
                raise RunnerError(f"vela must be true or false, got {vela!r}")
            vela = vela.strip().lower() in ("1", "true", "yes")
        self.vela = bool(vela)
        self.flush = CacheFlush(flush_cache_mb)
        if self.vela and not delegate:
            raise RunnerError("vela=true compiles models into 'ethos-u' custom operators, which only an Ethos-U "
                              "delegate runs: give --delegate (on the i.MX93: /usr/lib/libethosu_delegate.so)")
        self._vela_how: str | None = None
        self._mod, self.runtime, self.runtime_version = import_interpreter_module(runtime)
        self._delegate_obj: Any = None
        if self.delegate:
            if not os.path.exists(self.delegate):
                raise RunnerError(f"delegate library {self.delegate!r} does not exist")
            try:
                self._delegate_obj = self._mod.load_delegate(self.delegate, self.delegate_options)
            except (ValueError, OSError, RuntimeError) as e:
                raise RunnerError(f"cannot load delegate {self.delegate!r} with options "
                                  f"{self.delegate_options}: {e}") from e

    # ------------------------------------------------------------------ Runner API

    def prepare(self, model: bytes) -> Prepared:
        model = bytes(model)
        if len(model) < 8 or model[4:8] != _TFLITE_IDENT:
            raise RunnerError(f"not a TFLite model: {len(model)} bytes without the 'TFL3' flatbuffer identifier")
        if self.vela:
            from .vela_runner import vela_compile  # noqa: PLC0415

            model, self._vela_how = vela_compile(model)
        kwargs: dict[str, Any] = {"model_content": model, "num_threads": self.threads}
        if self._delegate_obj is not None:
            kwargs["experimental_delegates"] = [self._delegate_obj]
        if not self.use_xnnpack:
            resolver = getattr(self._mod, "OpResolverType", None)
            if resolver is None:  # pragma: no cover - very old tflite_runtime
                raise RunnerError(f"{self.runtime} {self.runtime_version} cannot disable XNNPACK")
            kwargs["experimental_op_resolver_type"] = resolver.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        try:
            interp = self._mod.Interpreter(**kwargs)
            interp.allocate_tensors()
            inputs = interp.get_input_details()
            outputs = interp.get_output_details()
            rng = np.random.default_rng(self.seed)
            for d in inputs:
                interp.set_tensor(d["index"], _random_input(rng, d["shape"], d["dtype"]))
        except (ValueError, RuntimeError) as e:
            raise RunnerError(f"LiteRT ({self.runtime} {self.runtime_version}) rejected the model: {e}") from e
        if not inputs:
            raise RunnerError("the TFLite model has no inputs")
        precision = _precision(inputs[0]["dtype"])
        if self.precision is not None and precision != self.precision:
            raise RunnerError(f"the model's input is {precision}, but this runner was set up for {self.precision} "
                              "models")
        info: dict[str, Any] = {
            "precision": precision,
            "inputs": [{"name": d["name"], "shape": [int(s) for s in d["shape"]], "dtype": np.dtype(d["dtype"]).name}
                       for d in inputs],
            "outputs": [{"name": d["name"], "shape": [int(s) for s in d["shape"]], "dtype": np.dtype(d["dtype"]).name}
                        for d in outputs],
        }
        ops = getattr(interp, "_get_ops_details", None)
        if ops is not None:
            try:
                info["ops"] = [str(o["op_name"]) for o in ops()]
            except Exception:  # pragma: no cover - private API, informative only
                pass
        return Prepared(_Session(interp, inputs, outputs, model), "tflite", info)

    def time(self, prepared: Prepared, *, warmup: int, runs: int) -> Timing:
        if runs < 1:
            raise RunnerError(f"runs must be >= 1, got {runs}")
        sess: _Session = prepared.handle
        invoke = sess.interpreter.invoke
        evict = self.flush.evict
        try:
            for _ in range(max(int(warmup), 0)):
                evict()
                invoke()
            times: list[float] = []
            clock = time.perf_counter_ns
            for _ in range(int(runs)):
                evict()
                t0 = clock()
                invoke()
                t1 = clock()
                times.append((t1 - t0) / 1e6)
        except (ValueError, RuntimeError) as e:
            raise RunnerError(f"LiteRT invoke failed: {e}") from e
        return timing_from_runs(times)

    def environment(self) -> dict[str, Any]:
        host = host_info()
        target = f"{os.path.basename(self.delegate)} delegate" if self.delegate else (
            "CPU, XNNPACK" if self.use_xnnpack else "CPU, builtin kernels")
        env = {
            "runner": self.name,
            "runtime": self.runtime,
            "runtime_version": self.runtime_version,
            "versions": {self.runtime: self.runtime_version, "numpy": np.__version__, "python": host["python"]},
            "delegate": self.delegate,
            "delegate_options": dict(self.delegate_options),
            "xnnpack": self.use_xnnpack,
            "vela_compile": bool(self.vela),
            "threads": self.threads,
            "precision": self.precision,
            "provenance": self.provenance,
            "host": host,
            "device_name": f"{host['cpu_model']} ({target})",
            "timer": "time.perf_counter_ns around Interpreter.invoke()",
        }
        env.update(self.flush.environment())  # only when on: warm environments keep their identity
        return env

    def close(self) -> None:
        self._delegate_obj = None
