"""slice: a one-output slice is benchmarked as whole channels copied out; splits are refused."""
import io

import numpy as np
import onnxruntime as ort
import pytest
import torch

from bench.modelgen import make_inputs, padded_model, single_layer_model, to_onnx
from estimator.layers import LayerSpecError
from estimator.onnx_import import load_network


def test_channel_slice_copies_the_first_channels():
    p = dict(h=8, w=8, c=16, elems_out=512)
    ir = single_layer_model("slice", p)
    x = make_inputs(ir)["x0"]
    y = ort.InferenceSession(to_onnx(ir), providers=["CPUExecutionProvider"]).run(None, {"x0": x})[0]
    np.testing.assert_array_equal(y, x[:, :8])
    ir = padded_model("slice", p)  # the first 8 x 8 rows of (1, 16 x 8, 1, 8)
    assert ir.outputs[0].shape == (1, 1, 1, 8)
    out = ort.InferenceSession(to_onnx(ir), providers=["CPUExecutionProvider"]).run(None, make_inputs(ir))[0]
    assert out.shape == (1, 1, 1, 8)


def test_qkv_gather_imports_as_a_benchable_slice_shape():
    class Qkv(torch.nn.Module):
        def forward(self, x):
            qkv = x.reshape(1, 50, 3, 4, 16).permute(2, 0, 3, 1, 4)
            return qkv[0] + qkv[1]

    buf = io.BytesIO()
    torch.onnx.export(Qkv().eval(), torch.randn(1, 50, 192), buf, opset_version=17, dynamo=False)
    sl = [l for l in load_network(buf.getvalue()).layers if l.type == "slice"]
    assert len(sl) == 2
    for l in sl:
        p = {k: v for k, v in l.params.items() if k != "n"}
        assert p["elems_out"] == 50 * 4 * 16
        padded_model("slice", p)


def test_a_split_into_several_outputs_is_refused_in_one_line():
    with pytest.raises(LayerSpecError, match="cannot be benchmarked"):
        padded_model("slice", dict(h=4, w=4, c=8, elems_out=128, n_outputs=2))
