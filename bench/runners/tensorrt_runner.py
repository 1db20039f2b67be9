"""TensorRT runner for Jetson-class targets (and any machine with an NVIDIA GPU).

``prepare`` builds an engine from ONNX bytes with TensorRT's ONNX parser, allocates device
buffers for every I/O tensor and fills the inputs once with seeded random data; ``time``
runs ``warmup`` untimed inferences, then times each of ``runs`` inferences with a pair of
CUDA events recorded on the inference stream around ``execute_async_v3``.

Precision:

* ``fp32``: TF32 is switched off (TensorRT enables it by default on Ampere+).
* ``fp16``: TensorRT < 11 sets ``BuilderFlag.FP16`` (TensorRT picks fp16 kernels where
  faster). TensorRT >= 11 removed that flag (strongly typed networks only), so the ONNX
  model is converted to fp16 first (``onnxruntime.transformers.float16``, I/O kept fp32).
* ``int8``: TensorRT < 11 sets ``BuilderFlag.INT8`` with an entropy calibrator
  (``IInt8EntropyCalibrator2``) fed ``calibration_batches`` batches of seeded N(0, 1)
  data. TensorRT >= 11 removed implicit quantization, so the model is quantized
  explicitly instead: ONNX Runtime's ``quantize_static`` inserts symmetric int8 Q/DQ
  nodes calibrated (MinMax) on the same kind of random data.

CUDA binding: ``cuda-python`` (``cuda.bindings.runtime``, or ``cuda.cudart`` in older
releases), NVIDIA's own binding, which TensorRT's Python samples use, installs as a
wheel with no build step (PyCUDA compiles against the local CUDA toolkit, awkward on
Jetsons), and exposes CUDA events and streams directly. It is the ``tensorrt`` extra's
second package.

TensorRT and CUDA are imported lazily and guarded: where either is missing,
constructing the runner (``get_runner("tensorrt")``) raises :class:`RunnerError` saying
what to install. Needs TensorRT >= 8.5 (``execute_async_v3``, named I/O tensors): JetPack
5.1+ on Jetsons.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .base import Prepared, Runner, RunnerError, Timing, timing_from_runs

__all__ = ["TensorRTRunner", "import_tensorrt"]

PRECISIONS = ("fp32", "fp16", "int8")


def import_tensorrt() -> tuple[Any, Any]:
    """``(tensorrt, cudart)``; :class:`RunnerError` naming what is missing."""
    try:
        trt = importlib.import_module("tensorrt")
    except ImportError as e:
        raise RunnerError(
            "TensorRT is not available here (import tensorrt failed: "
            f"{e}). The 'tensorrt' runner needs an NVIDIA GPU with TensorRT and cuda-python: "
            "pip install 'confident-latency[tensorrt]' (on a Jetson use JetPack's TensorRT), "
            "or time on the board through a bench agent (--runner agent)") from e
    cudart = None
    errors = []
    for mod in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            cudart = importlib.import_module(mod)
            break
        except ImportError as e:
            errors.append(f"{mod}: {e}")
    if cudart is None:
        raise RunnerError("the 'tensorrt' runner needs cuda-python for CUDA streams and events: "
                          "pip install cuda-python (" + "; ".join(errors) + ")")
    return trt, cudart


def _major(version: str) -> int:
    try:
        return int(version.split(".")[0])
    except ValueError:  # pragma: no cover
        return 0


@dataclass(eq=False)
class _Engine:
    engine: Any
    context: Any
    stream: Any
    buffers: dict[str, int]
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    start: Any
    end: Any
    freed: bool = field(default=False)


class _Cuda:
    """Thin checked wrapper over cuda-python's runtime API (calls return ``(err, ...)``)."""

    def __init__(self, cudart: Any) -> None:
        self.rt = cudart

    def __call__(self, result: Any) -> Any:
        if isinstance(result, tuple):
            err, rest = result[0], result[1:]
        else:
            err, rest = result, ()
        if int(err) != int(self.rt.cudaError_t.cudaSuccess):
            try:
                msg = self.rt.cudaGetErrorString(err)[1].decode()
            except Exception:  # pragma: no cover
                msg = str(err)
            raise RunnerError(f"CUDA error {int(err)}: {msg}")
        if not rest:
            return None
        return rest[0] if len(rest) == 1 else rest

    def h2d(self, dst: int, arr: np.ndarray) -> None:
        arr = np.ascontiguousarray(arr)
        self(self.rt.cudaMemcpy(dst, arr.ctypes.data, arr.nbytes, self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice))


def _ptr(handle: Any) -> int:
    """An integer address of a cuda-python handle (stream, pointer)."""
    try:
        return int(handle)
    except TypeError:
        return int(handle.getPtr())


class TensorRTRunner(Runner):
    """Times ONNX models as TensorRT engines on one GPU.

    Options: ``precision`` (``"fp16"``, ``"int8"`` or ``"fp32"``), ``workspace_mb``
    (builder workspace pool), ``device`` (CUDA device index), ``calibration_batches``
    (int8), ``seed`` (input and calibration data).
    """

    name = "tensorrt"
    model_format = "onnx"
    provenance = "measured"

    def __init__(self, precision: str = "fp16", workspace_mb: int = 1024, device: int = 0,
                 calibration_batches: int = 8, seed: int = 0) -> None:
        if precision not in PRECISIONS:
            raise RunnerError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        self.precision = precision
        self.workspace_mb = int(workspace_mb)
        if self.workspace_mb < 1:
            raise RunnerError(f"workspace_mb must be >= 1, got {workspace_mb}")
        self.device = int(device)
        self.calibration_batches = max(int(calibration_batches), 1)
        self.seed = int(seed)
        self.trt, cudart = import_tensorrt()
        self.cuda = _Cuda(cudart)
        self.trt_version = str(self.trt.__version__)
        self.trt_major = _major(self.trt_version)
        try:
            n_dev = self.cuda(cudart.cudaGetDeviceCount())
        except RunnerError as e:
            raise RunnerError(f"no usable NVIDIA GPU for TensorRT here ({e})") from None
        if self.device < 0 or self.device >= int(n_dev):
            raise RunnerError(f"CUDA device {self.device} does not exist ({n_dev} device(s) visible)")
        self.cuda(cudart.cudaSetDevice(self.device))
        self.logger = self.trt.Logger(self.trt.Logger.WARNING)
        self._open: list[_Engine] = []

    # ------------------------------------------------------------------ building

    def _prequantize(self, onnx_bytes: bytes) -> bytes:
        """TensorRT >= 11: make precision explicit in the ONNX model itself."""
        import onnx

        model = onnx.load_from_string(onnx_bytes)
        if self.precision == "fp16":
            from onnxruntime.transformers.float16 import convert_float_to_float16

            return convert_float_to_float16(model, keep_io_types=True).SerializeToString()
        if self.precision == "int8":
            import os
            import tempfile

            from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

            rng = np.random.default_rng(self.seed)
            specs = _onnx_inputs(model)
            batches = [{n: rng.standard_normal(s).astype(np.float32) for n, s in specs}
                       for _ in range(self.calibration_batches)]

            class _Reader(CalibrationDataReader):
                def __init__(self) -> None:
                    self._it = iter(batches)

                def get_next(self) -> dict[str, np.ndarray] | None:
                    return next(self._it, None)

            with tempfile.TemporaryDirectory(prefix="trt-q-") as tmp:
                src, dst = os.path.join(tmp, "in.onnx"), os.path.join(tmp, "q.onnx")
                onnx.save(model, src)
                quantize_static(src, dst, _Reader(), quant_format=QuantFormat.QDQ,
                                activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                                per_channel=True,
                                extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
                return open(dst, "rb").read()
        return onnx_bytes

    def _calibrator(self, inputs: list[tuple[str, tuple[int, ...]]]) -> Any:
        trt, cuda = self.trt, self.cuda
        rng = np.random.default_rng(self.seed)
        n_batches = self.calibration_batches
        bufs = {name: cuda(cuda.rt.cudaMalloc(int(np.prod(shape)) * 4)) for name, shape in inputs}

        class _RandomCalibrator(trt.IInt8EntropyCalibrator2):  # type: ignore[misc,name-defined]
            def __init__(self) -> None:
                trt.IInt8EntropyCalibrator2.__init__(self)
                self.left = n_batches

            def get_batch_size(self) -> int:
                return 1

            def get_batch(self, names: list[str]) -> list[int] | None:
                if self.left <= 0:
                    return None
                self.left -= 1
                for name, shape in inputs:
                    cuda.h2d(_ptr(bufs[name]), rng.standard_normal(shape).astype(np.float32))
                return [_ptr(bufs[n]) for n in names]

            def read_calibration_cache(self) -> None:
                return None

            def write_calibration_cache(self, cache: Any) -> None:
                return None

            def free(self) -> None:
                for b in bufs.values():
                    cuda(cuda.rt.cudaFree(b))
                bufs.clear()

        return _RandomCalibrator()

    def build(self, onnx_bytes: bytes) -> bytes:
        """Serialized TensorRT engine for ``onnx_bytes`` at this runner's precision."""
        trt = self.trt
        if self.trt_major >= 11:
            try:
                onnx_bytes = self._prequantize(onnx_bytes)
            except Exception as e:
                raise RunnerError(f"cannot make the ONNX model {self.precision} for TensorRT "
                                  f"{self.trt_version}: {e}") from e
        builder = trt.Builder(self.logger)
        flags = 0
        explicit = getattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH", None)
        if explicit is not None and self.trt_major < 10:
            flags |= 1 << int(explicit)
        strongly = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
        if strongly is not None and self.trt_major >= 11:
            flags |= 1 << int(strongly)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, self.logger)
        if not parser.parse(onnx_bytes):
            errs = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RunnerError(f"TensorRT's ONNX parser rejected the model: {errs or 'no detail'}")
        config = builder.create_builder_config()
        ws = self.workspace_mb << 20
        if hasattr(config, "set_memory_pool_limit"):
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, ws)
        else:  # pragma: no cover - TensorRT < 8.4
            config.max_workspace_size = ws
        if hasattr(trt, "ProfilingVerbosity"):
            config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
        # dynamic input dimensions (none in bench's models) are fixed to 1
        inputs: list[tuple[str, tuple[int, ...]]] = []
        profile = None
        for i in range(network.num_inputs):
            t = network.get_input(i)
            shape = tuple(int(d) for d in t.shape)
            fixed = tuple(d if d > 0 else 1 for d in shape)
            if fixed != shape:
                profile = profile or builder.create_optimization_profile()
                profile.set_shape(t.name, fixed, fixed, fixed)
            inputs.append((t.name, fixed))
        if profile is not None:
            config.add_optimization_profile(profile)
        calibrator = None
        if self.trt_major < 11:
            if self.precision == "fp16":
                config.set_flag(trt.BuilderFlag.FP16)
            elif self.precision == "int8":
                config.set_flag(trt.BuilderFlag.INT8)
                calibrator = self._calibrator(inputs)
                config.int8_calibrator = calibrator
                if profile is not None and hasattr(config, "set_calibration_profile"):
                    config.set_calibration_profile(profile)
        if self.precision == "fp32" and hasattr(trt.BuilderFlag, "TF32"):
            config.clear_flag(trt.BuilderFlag.TF32)
        try:
            serialized = builder.build_serialized_network(network, config)
        finally:
            if calibrator is not None:
                calibrator.free()
        if serialized is None:
            raise RunnerError(f"TensorRT {self.trt_version} could not build an engine "
                              f"({self.precision}); see its log above")
        return bytes(serialized)

    # ------------------------------------------------------------------ Runner API

    def prepare(self, model: bytes) -> Prepared:
        trt, cuda = self.trt, self.cuda
        serialized = self.build(bytes(model))
        runtime = trt.Runtime(self.logger)
        engine = runtime.deserialize_cuda_engine(serialized)
        if engine is None:
            raise RunnerError("TensorRT could not deserialize the engine it built")
        context = engine.create_execution_context()
        stream = cuda(cuda.rt.cudaStreamCreate())
        rng = np.random.default_rng(self.seed)
        buffers: dict[str, int] = {}
        ins: list[dict[str, Any]] = []
        outs: list[dict[str, Any]] = []
        try:
            for i in range(engine.num_io_tensors):
                name = engine.get_tensor_name(i)
                if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                    shape = tuple(d if d > 0 else 1 for d in engine.get_tensor_shape(name))
                    context.set_input_shape(name, shape)
            for i in range(engine.num_io_tensors):
                name = engine.get_tensor_name(i)
                is_in = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
                shape = tuple(int(d) for d in context.get_tensor_shape(name))
                dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
                nbytes = max(int(np.prod(shape)) * dtype.itemsize, 1)
                ptr = cuda(cuda.rt.cudaMalloc(nbytes))
                buffers[name] = ptr
                context.set_tensor_address(name, _ptr(ptr))
                rec = {"name": name, "shape": list(shape), "dtype": dtype.name}
                if is_in:
                    if dtype.kind == "f":
                        data = rng.standard_normal(shape).astype(dtype)
                    else:
                        data = rng.integers(-8, 8, size=shape).astype(dtype)
                    cuda.h2d(_ptr(ptr), data)
                    ins.append(rec)
                else:
                    outs.append(rec)
            start = cuda(cuda.rt.cudaEventCreate())
            end = cuda(cuda.rt.cudaEventCreate())
        except Exception:
            for p in buffers.values():
                cuda.rt.cudaFree(p)
            cuda.rt.cudaStreamDestroy(stream)
            raise
        handle = _Engine(engine, context, stream, buffers, ins, outs, start, end)
        self._open.append(handle)
        info = {"precision": self.precision, "inputs": ins, "outputs": outs,
                "engine_bytes": len(serialized), "layers": int(getattr(engine, "num_layers", 0))}
        return Prepared(handle, "onnx", info)

    def _enqueue(self, h: _Engine) -> None:
        if not h.context.execute_async_v3(_ptr(h.stream)):
            raise RunnerError("TensorRT execute_async_v3 failed")

    def time(self, prepared: Prepared, *, warmup: int, runs: int) -> Timing:
        if runs < 1:
            raise RunnerError(f"runs must be >= 1, got {runs}")
        h: _Engine = prepared.handle
        cuda, rt = self.cuda, self.cuda.rt
        for _ in range(max(int(warmup), 0)):
            self._enqueue(h)
        cuda(rt.cudaStreamSynchronize(h.stream))
        times: list[float] = []
        for _ in range(int(runs)):
            cuda(rt.cudaEventRecord(h.start, h.stream))
            self._enqueue(h)
            cuda(rt.cudaEventRecord(h.end, h.stream))
            cuda(rt.cudaEventSynchronize(h.end))
            times.append(float(cuda(rt.cudaEventElapsedTime(h.start, h.end))))
        return timing_from_runs(times)

    def per_layer(self, prepared: Prepared, runs: int = 10) -> dict[str, float]:
        """Mean per-layer times (ms) from TensorRT's ``IProfiler`` over ``runs`` inferences."""
        trt = self.trt
        h: _Engine = prepared.handle
        totals: dict[str, float] = {}

        class _Profiler(trt.IProfiler):  # type: ignore[misc,name-defined]
            def __init__(self) -> None:
                trt.IProfiler.__init__(self)

            def report_layer_time(self, layer_name: str, ms: float) -> None:
                totals[layer_name] = totals.get(layer_name, 0.0) + float(ms)

        h.context.profiler = _Profiler()
        try:
            for _ in range(runs):
                self._enqueue(h)
                self.cuda(self.cuda.rt.cudaStreamSynchronize(h.stream))
        finally:
            try:
                h.context.profiler = None
            except TypeError:  # bindings that refuse None: keep the profiler, it only collects
                pass
        if not totals:
            raise RunnerError("TensorRT's profiler reported no layers")
        return {k: v / runs for k, v in totals.items()}

    def environment(self) -> dict[str, Any]:
        rt = self.cuda.rt
        props = self.cuda(rt.cudaGetDeviceProperties(self.device))
        name = props.name.decode(errors="replace").rstrip("\x00") if isinstance(props.name, bytes) else str(props.name)
        runtime_v = int(self.cuda(rt.cudaRuntimeGetVersion()))
        driver_v = int(self.cuda(rt.cudaDriverGetVersion()))
        cuda_rt = f"{runtime_v // 1000}.{runtime_v % 1000 // 10}"
        cuda_drv = f"{driver_v // 1000}.{driver_v % 1000 // 10}"
        from .base import host_info

        host = host_info()
        return {
            "runner": self.name,
            "runtime": "tensorrt",
            "runtime_version": self.trt_version,
            "versions": {"tensorrt": self.trt_version, "cuda-runtime": cuda_rt, "cuda-driver": cuda_drv,
                         "python": host["python"]},
            "cuda_runtime_version": cuda_rt,
            "cuda_driver_version": cuda_drv,
            "device_name": name,
            "gpu": name,
            "compute_capability": f"{props.major}.{props.minor}",
            "device": self.device,
            "precision": self.precision,
            "int8_method": (None if self.precision != "int8" else
                            "entropy calibrator (random data)" if self.trt_major < 11 else
                            "explicit Q/DQ via onnxruntime quantize_static (random data)"),
            "workspace_mb": self.workspace_mb,
            "threads": None,
            "provenance": self.provenance,
            "timer": "CUDA events around execute_async_v3 on one stream",
            "host": host,
        }

    def release(self, prepared: Prepared) -> None:
        """Free a prepared engine's device buffers, events and stream."""
        h: _Engine = prepared.handle
        self._free(h)

    def _free(self, h: _Engine) -> None:
        if h.freed:
            return
        rt = self.cuda.rt
        for p in h.buffers.values():
            rt.cudaFree(p)
        rt.cudaEventDestroy(h.start)
        rt.cudaEventDestroy(h.end)
        rt.cudaStreamDestroy(h.stream)
        h.freed = True
        if h in self._open:
            self._open.remove(h)

    def close(self) -> None:
        for h in list(self._open):
            self._free(h)


def _onnx_inputs(model: Any) -> list[tuple[str, tuple[int, ...]]]:
    """Graph inputs (not initializers) with static shapes (dynamic dims -> 1)."""
    inits = {i.name for i in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = tuple(int(d.dim_value) if d.dim_value > 0 else 1 for d in vi.type.tensor_type.shape.dim)
        out.append((vi.name, dims))
    return out
