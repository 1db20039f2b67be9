"""reshape: benchmarked as what it is, the same contiguous data under another shape."""
import numpy as np
import onnxruntime as ort

from bench.modelgen import make_inputs, padded_model, single_layer_model, to_onnx
from bench.sampling import make_plan


def test_reshape_is_a_reinterpretation_of_the_same_data():
    p = dict(h=14, w=14, c=192)
    ir = single_layer_model("reshape", p)
    x = make_inputs(ir)["x0"]
    y = ort.InferenceSession(to_onnx(ir), providers=["CPUExecutionProvider"]).run(None, {"x0": x})[0]
    assert y.shape == (1, 14, 192, 14)
    np.testing.assert_array_equal(y.ravel(), x.ravel())
    out = ort.InferenceSession(to_onnx(padded_model("reshape", p)),
                               providers=["CPUExecutionProvider"]).run(None, make_inputs(padded_model("reshape", p)))[0]
    assert out.shape == (1, 1, 192, 14)


def test_sampled():
    assert len(make_plan(["reshape"], 10, prior_samples=10, seed=0)) == 20
