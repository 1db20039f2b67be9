"""matmul: attention's products of two activations, benchmarked with both operands from
padding convs, numerically the operator torch runs."""
import io

import numpy as np
import onnxruntime as ort
import torch

from bench.modelgen import make_inputs, padded_model, padding_keys, single_layer_model, to_onnx
from bench.sampling import make_plan
from estimator.onnx_import import load_network


def _run(ir):
    return ort.InferenceSession(to_onnx(ir), providers=["CPUExecutionProvider"]).run(None, make_inputs(ir))


def test_q_times_k_transposed():
    p = dict(b=3, m=50, k=16, n_cols=50)
    keys = padding_keys("matmul", p)
    # operands (1, 3, 50, 16) and (1, 3, 16, 50) padded as rows: (1, 150, 1, 16), (1, 48, 1, 50)
    assert keys.inputs == ((1, 16, 150), (1, 50, 48)) and keys.output == (1, 50, 150)
    assert [o.kind for o in padded_model("matmul", p).ops] == ["conv", "conv", "reshape", "reshape", "matmul",
                                                                  "reshape", "conv"]
    ir = single_layer_model("matmul", p)
    feeds = make_inputs(ir)
    (y,) = ort.InferenceSession(to_onnx(ir), providers=["CPUExecutionProvider"]).run(None, feeds)
    ref = torch.from_numpy(feeds["x0"]) @ torch.from_numpy(feeds["x1"])
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-4, atol=1e-4)
    (out,) = _run(padded_model("matmul", p))
    assert out.shape == (1, 1, 1, 50)


def test_attention_products_import_as_benchable_matmuls():
    class Attn(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v

    buf = io.BytesIO()
    args = (torch.randn(1, 4, 49, 32), torch.randn(1, 4, 49, 32), torch.randn(1, 4, 49, 32))
    torch.onnx.export(Attn().eval(), args, buf, opset_version=17, dynamo=False)
    mms = [l for l in load_network(buf.getvalue()).layers if l.type == "matmul"]
    assert [(l.params["b"], l.params["m"], l.params["k"], l.params["n_cols"]) for l in mms] == [(4, 49, 32, 49),
                                                                                                 (4, 49, 49, 32)]
    for l in mms:
        padded_model("matmul", {k: v for k, v in l.params.items()})


def test_sampled_from_an_attention_prior():
    plan = make_plan(["matmul"], 10, prior_samples=20, seed=0)
    assert len(plan) == 30
    assert any(c.params.get("k") in (16, 24, 32, 48, 64) for c in plan)
