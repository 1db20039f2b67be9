"""layernorm: imported from torch's LayerNorm, benchmarked with smart padding on its own data
layout, numerically the operator torch runs."""
import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch import nn

from bench.modelgen import make_inputs, padded_model, padding_keys, single_layer_model, to_onnx
from bench.sampling import make_plan
from estimator.layers import SAMPLED_TYPES, describe
from estimator.onnx_import import load_network


def _export(module: nn.Module, shape: tuple[int, ...], opset: int = 17) -> bytes:
    import io
    buf = io.BytesIO()
    torch.onnx.export(module.eval(), torch.randn(*shape), buf, opset_version=opset, dynamo=False)
    return buf.getvalue()


class _Mixer(nn.Module):
    """A pre-norm residual MLP block: the norm's input also feeds the residual add, and a
    token mean (a ReduceMean that is not a norm) follows."""

    def __init__(self):
        super().__init__()
        self.ln, self.fc = nn.LayerNorm(48), nn.Linear(48, 48)

    def forward(self, x):
        y = x + self.fc(self.ln(x))
        return y.mean(dim=1)


@pytest.mark.parametrize("opset", [13, 14, 16])
def test_a_decomposed_layernorm_is_one_layer_as_onnx_runtime_runs_it(opset):
    """Below opset 17 torch writes LayerNorm as ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt,
    Div, Mul, Add: one layernorm layer, as at opset 17, and the token mean stays a pool."""
    old = load_network(_export(_Mixer(), (1, 50, 48), opset))
    new = load_network(_export(_Mixer(), (1, 50, 48), 17))
    assert [(l.type, l.params) for l in old.layers] == [(l.type, l.params) for l in new.layers]
    ln = [l for l in old.layers if l.type == "layernorm"]
    assert len(ln) == 1 and ln[0].params == {"n": 1, "rows": 50, "c": 48}
    assert ln[0].nodes[0].endswith("ReduceMean") and ln[0].nodes[6].endswith("Div")  # (onnxsim may fold the scale and bias onward)
    assert [l.type for l in old.layers].count("globalpool") == 1
    from service.client import strip_initializers  # as the service receives it: no onnxsim, scale and bias stay
    bare = load_network(strip_initializers(_export(_Mixer(), (1, 50, 48), opset)).SerializeToString())
    ln = [l for l in bare.layers if l.type == "layernorm"]
    assert len(ln) == 1 and len(ln[0].nodes) == 9 and [l.type for l in bare.layers].count("mul") == 0


def test_counts():
    c = describe("layernorm", dict(rows=197, c=192))
    assert c.features == {"rows": 197, "c": 192, "params": 384}
    assert c.ops == 197 * 192 and c.params == 384 and c.output_shape == (1, 197, 192)


def test_torch_layernorm_imports_as_one_layer():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.ln = nn.Linear(64, 96), nn.LayerNorm(96, eps=1e-6)

        def forward(self, x):
            return self.ln(self.fc(x))

    net = load_network(_export(Block(), (1, 50, 64)))
    ln = [l for l in net.layers if l.type == "layernorm"]
    assert len(ln) == 1 and ln[0].params == {"n": 1, "rows": 50, "c": 96}
    assert ln[0].op_type == "LayerNormalization" and "unknown_op" not in ln[0].flags
    assert not [l for l in net.layers if l.type == "other"]


def test_layernorm_over_a_feature_map_normalises_all_trailing_axes():
    class Norm(nn.Module):
        def forward(self, x):
            return nn.functional.layer_norm(x, x.shape[1:])

    (ln,) = [l for l in load_network(_export(Norm(), (1, 8, 7, 7))).layers if l.type == "layernorm"]
    assert ln.params == {"n": 1, "rows": 1, "c": 8 * 7 * 7}


def test_padded_model_runs_the_operator_torch_runs():
    p = dict(rows=49, c=96)
    keys = padding_keys("layernorm", p)
    assert keys.inputs == ((1, 96, 49),) and keys.output == (1, 96, 49)  # (1, rows, 1, c)
    ir = padded_model("layernorm", p)
    assert [o.kind for o in ir.ops] == ["conv", "layernorm", "conv"]
    out = ort.InferenceSession(to_onnx(ir), providers=["CPUExecutionProvider"]).run(None, make_inputs(ir))[0]
    assert out.shape == (1, 1, 1, 96) and np.isfinite(out).all()
    ir1 = single_layer_model("layernorm", p)
    import onnx
    from onnx import numpy_helper
    data = to_onnx(ir1)
    w = {i.name: numpy_helper.to_array(i) for i in onnx.load_from_string(data).graph.initializer}
    x = make_inputs(ir1)["x0"]
    y = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x0": x})[0]
    ref = nn.functional.layer_norm(torch.from_numpy(x.copy()), (96,), torch.from_numpy(w["lum/scale"].copy()),
                                   torch.from_numpy(w["lum/bias"].copy()), 1e-5).numpy()
    assert np.abs(y - ref).max() < 1e-4


def test_sampled_with_a_token_prior():
    assert "layernorm" in SAMPLED_TYPES
    plan = make_plan(["layernorm"], 20, prior_samples=20, seed=0)
    assert len(plan) == 40
    assert sum(c.params["rows"] in (49, 50, 196, 197) for c in plan) >= 3


@pytest.mark.parametrize("bad", [dict(rows=0, c=8), dict(rows=4), dict(rows=4, c=-1)])
def test_bad_params_are_one_precise_error(bad):
    from estimator.layers import LayerSpecError
    with pytest.raises(LayerSpecError, match="parameter"):
        describe("layernorm", bad)
