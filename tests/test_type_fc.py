"""fc over token rows (a transformer's Linear on (1, m, c_in)) is benchmarked on its own layout;
one row (a classifier) as before; ONNX and TFLite plans both hold them."""
import io

import numpy as np
import onnxruntime as ort
import torch

from bench.modelgen import make_inputs, make_weights, padded_model, padding_keys, single_layer_model, to_onnx
from bench.sampling import make_plan
from estimator.layers import SPECS
from estimator.onnx_import import load_network


def test_token_rows_single_layer_is_torchs_linear():
    p = dict(m=50, c_in=64, c_out=96)
    ir = single_layer_model("fc", p)
    x = make_inputs(ir)["x0"]
    w = make_weights(ir)["lum"]
    y = ort.InferenceSession(to_onnx(ir), providers=["CPUExecutionProvider"]).run(None, {"x0": x})[0]
    np.testing.assert_allclose(y, x @ w["w"] + w["b"], rtol=1e-4, atol=1e-4)


def test_token_rows_are_padded_with_a_channel_per_row():
    p = dict(m=197, c_in=192, c_out=576)
    keys = padding_keys("fc", p)  # (1, m, 1, c): 1x1 padding convs 1 -> m at 1 x c, cheap per element
    assert keys.inputs == ((1, 192, 197),) and keys.output == (1, 576, 197)
    ir = padded_model("fc", p)
    assert [o.kind for o in ir.ops] == ["conv", "fc", "conv"]
    out = ort.InferenceSession(to_onnx(ir), providers=["CPUExecutionProvider"]).run(None, make_inputs(ir))[0]
    assert out.shape == (1, 1, 1, 576)
    assert padding_keys("fc", dict(c_in=64, c_out=10)).inputs == ((1, 1, 64),)  # one row: as before


def test_imported_transformer_linear_is_benchable():
    buf = io.BytesIO()
    torch.onnx.export(torch.nn.Linear(64, 128).eval(), torch.randn(1, 50, 64), buf, opset_version=17, dynamo=False)
    (fc,) = [l for l in load_network(buf.getvalue()).layers if l.type == "fc"]
    assert (fc.params["m"], fc.params["c_in"], fc.params["c_out"]) == (50, 64, 128)
    padded_model("fc", fc.params)


def test_prior_has_token_rows_for_onnx_and_tflite():
    """Token rows render to both formats (TFLite: one FULLY_CONNECTED on NHWC (1, 1, m, c_in))."""
    for fmt in ("onnx", "tflite"):
        plan = make_plan(["fc"], 0, prior_samples=40, seed=0, model_format=fmt)
        assert sum(c.params.get("m", 1) > 1 for c in plan) >= 10 and len(plan) == 40
        assert all(SPECS["fc"].renders(c.params, fmt) for c in plan)


def test_prior_token_rows_have_transformer_widths():
    """The prior's token rows are a transformer's Linear layers: q/k/v (d -> 3d), the output
    projection (d -> d) and the MLP (d -> e d -> d), with d from the prior's widths, so that the
    narrow ones (DeiT-Tiny's d = 192, MobileViT's 96-144) lie among the rows instead of below them."""
    from estimator.layers import space

    toks = [c.params for c in make_plan(["fc"], 0, prior_samples=400, seed=0) if c.params.get("m", 1) > 1]
    assert len(toks) >= 100
    shapes = {(d, o) for d in space.PRIOR_WIDTHS for o in (3 * d, d, 2 * d, 4 * d)}
    shapes |= {(e * d, d) for d in space.PRIOR_WIDTHS for e in (2, 4)}
    top = space.SPACE_MAX["fc_c"]
    assert all((p["c_in"], p["c_out"]) in shapes or max(p["c_in"], p["c_out"]) == top for p in toks)
    assert min(min(p["c_in"], p["c_out"]) for p in toks) < 256
    roles = {(p["c_out"] // p["c_in"]) if p["c_out"] >= p["c_in"] else -(p["c_in"] // p["c_out"]) for p in toks}
    assert {1, 2, 3, 4, -2, -4} <= roles
