"""transpose: what it costs depends on whether the last axis moves; both kinds are
benchmarked as rank-4 transposes of the same elements, numerically what torch computes."""
import io

import numpy as np
import onnxruntime as ort
import torch

from bench.modelgen import make_inputs, padded_model, single_layer_model, to_onnx
from estimator.layers import describe
from estimator.onnx_import import load_network


def test_moves_last_is_a_feature_and_picks_the_benchmarked_perm():
    kept = describe("transpose", dict(h=3, w=64, c=197, rank=4, moves_last=0))
    moved = describe("transpose", dict(h=197, w=64, c=3, rank=4, moves_last=1))
    assert kept.features["moves_last"] == 0 and moved.features["moves_last"] == 1
    assert kept.output_shape == (1, 3, 197, 64) and moved.output_shape == (1, 3, 64, 197)
    for p, perm in ((dict(h=3, w=8, c=5, rank=4, moves_last=0), (0, 2, 1, 3)),
                    (dict(h=3, w=8, c=5, rank=4, moves_last=1), (0, 1, 3, 2))):
        ir = single_layer_model("transpose", p)
        x = make_inputs(ir)["x0"]
        y = ort.InferenceSession(to_onnx(ir), providers=["CPUExecutionProvider"]).run(None, {"x0": x})[0]
        np.testing.assert_array_equal(y, np.transpose(x, perm))
        out = ort.InferenceSession(to_onnx(padded_model("transpose", p)),
                                   providers=["CPUExecutionProvider"]).run(None, make_inputs(padded_model("transpose", p)))[0]
        assert out.shape[:2] == (1, 1)


def test_attention_transposes_import_with_their_kind():
    class Heads(torch.nn.Module):
        def forward(self, x):
            q = x.reshape(1, 50, 4, 16).permute(0, 2, 1, 3)  # last axis kept
            return q @ q.transpose(-2, -1)  # k^T: last axis moved

    buf = io.BytesIO()
    torch.onnx.export(Heads().eval(), torch.randn(1, 50, 64), buf, opset_version=17, dynamo=False)
    tr = [l for l in load_network(buf.getvalue()).layers if l.type == "transpose"]
    assert sorted(l.params["moves_last"] for l in tr) == [0, 1]
    for l in tr:
        padded_model("transpose", {k: v for k, v in l.params.items() if k != "n"})
