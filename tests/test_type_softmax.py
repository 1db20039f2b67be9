"""softmax: benchmarked over the axis networks normalise (attention scores' last axis, a
classifier's channels), numerically the operator torch runs."""
import numpy as np
import onnxruntime as ort
import pytest
import torch

from bench.modelgen import make_inputs, padded_model, padding_keys, single_layer_model, to_onnx
from bench.sampling import make_plan
from estimator.layers import LayerSpecError, describe
from estimator.onnx_import import load_network


def _run(ir):
    return ort.InferenceSession(to_onnx(ir), providers=["CPUExecutionProvider"]).run(None, make_inputs(ir))[0]


def test_attention_scores_softmax_over_the_last_axis():
    p = dict(h=197, w=197, c=3, axis_len=197)
    assert padding_keys("softmax", p).inputs == ((1, 197, 591),)  # rows of (1, 3 x 197, 1, 197)
    ir = single_layer_model("softmax", p)
    x = make_inputs(ir)["x0"]
    np.testing.assert_allclose(_run(ir), torch.softmax(torch.from_numpy(x), -1).numpy(), rtol=1e-5, atol=1e-6)
    assert _run(padded_model("softmax", p)).shape == (1, 1, 1, 197)


def test_classifier_softmax_over_channels():
    ir = single_layer_model("softmax", dict(h=1, w=1, c=1000, axis_len=1000))
    x = make_inputs(ir)["x0"]
    np.testing.assert_allclose(_run(ir), torch.softmax(torch.from_numpy(x), 1).numpy(), rtol=1e-5, atol=1e-7)


def test_other_axes_are_refused_in_one_line():
    with pytest.raises(LayerSpecError, match="cannot be benchmarked"):
        padded_model("softmax", dict(h=4, w=5, c=6, axis_len=4))


def test_imported_attention_softmax_is_benchable():
    class Attn(torch.nn.Module):
        def forward(self, q, k):
            return torch.softmax(q @ k.transpose(-2, -1), dim=-1)

    import io
    buf = io.BytesIO()
    torch.onnx.export(Attn().eval(), (torch.randn(1, 3, 50, 16), torch.randn(1, 3, 50, 16)), buf, opset_version=17,
                      dynamo=False)
    (sm,) = [l for l in load_network(buf.getvalue()).layers if l.type == "softmax"]
    assert (sm.params["c"], sm.params["h"], sm.params["w"], sm.params["axis_len"]) == (3, 50, 50, 50)
    padded_model("softmax", {k: v for k, v in sm.params.items() if k != "n"})


def test_sampled_from_an_attention_prior():
    plan = make_plan(["softmax"], 10, prior_samples=20, seed=0)
    assert all(describe("softmax", c.params).ops > 0 for c in plan)
    assert sum(c.params["h"] == c.params["w"] and c.params["h"] in (49, 50, 196, 197) for c in plan) >= 2
