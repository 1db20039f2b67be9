"""TensorRT runner. The GPU tests need TensorRT + cuda-python + an NVIDIA GPU and are
skipped elsewhere (``pytest.importorskip``); the absent-TensorRT behaviour is checked
wherever TensorRT is *not* installed."""
from __future__ import annotations

import importlib.util

import pytest

from bench.runners.base import RunnerError, get_runner

HAVE_TRT = importlib.util.find_spec("tensorrt") is not None


@pytest.mark.skipif(HAVE_TRT, reason="TensorRT is installed here")
def test_get_runner_without_tensorrt_raises_a_clear_runner_error() -> None:
    with pytest.raises(RunnerError, match=r"TensorRT is not available.*confident-latency\[tensorrt\]"):
        get_runner("tensorrt", precision="fp16")


@pytest.fixture(scope="module")
def onnx_model() -> bytes:
    from bench.modelgen import padded_model, to_onnx

    return to_onnx(padded_model("conv2d", dict(h=16, w=16, c_in=8, c_out=16, k_h=3, k_w=3, s_h=2, s_w=2)))


@pytest.fixture(scope="module")
def trt_modules() -> None:
    pytest.importorskip("tensorrt")
    if importlib.util.find_spec("cuda") is None:
        pytest.skip("cuda-python is not installed")


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_builds_and_times_an_engine(trt_modules: None, onnx_model: bytes, precision: str) -> None:
    with get_runner("tensorrt", precision=precision, workspace_mb=256) as r:
        p = r.prepare(onnx_model)
        t = r.time(p, warmup=3, runs=20)
        assert t.n == 20
        assert 0 < t.min_ms <= t.median_ms <= t.p90_ms
        layers = r.per_layer(p)
        assert layers and all(v >= 0 for v in layers.values())
        env = r.environment()
        assert env["runner"] == "tensorrt" and env["precision"] == precision
        assert env["gpu"] and env["runtime_version"] and env["cuda_driver_version"]
        assert env["provenance"] == "measured"
        assert p.info["inputs"][0]["shape"] == [1, 1, 16, 16]


@pytest.mark.gpu
def test_malformed_onnx_is_a_runner_error(trt_modules: None) -> None:
    with get_runner("tensorrt", precision="fp32") as r:
        with pytest.raises(RunnerError):
            r.prepare(b"this is not an onnx model")


@pytest.mark.gpu
def test_bad_options_are_refused(trt_modules: None) -> None:
    with pytest.raises(RunnerError, match="precision"):
        get_runner("tensorrt", precision="int4")
    with pytest.raises(RunnerError, match="device"):
        get_runner("tensorrt", device=999)
