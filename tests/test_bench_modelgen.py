"""The smart-padding model IR and its ONNX emitter: every benchable type builds the three
models of Fig. 5, they pass onnx.checker, run in ONNX Runtime with the expected shapes,
and the single-layer models compute what the IR says (checked against torch)."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bench.modelgen import (
    BENCHABLE_TYPES,
    ModelIR,
    make_inputs,
    make_weights,
    padded_model,
    padding_keys,
    padding_model,
    same_pads,
    single_layer_model,
    to_onnx,
)
from estimator.layers import SPECS, LayerSpecError, describe

CASES = [
    ("conv2d", dict(h=20, w=20, c_in=8, c_out=16, k_h=3, k_w=3)),
    ("conv2d", dict(h=21, w=19, c_in=8, c_out=12, k_h=3, k_w=3, s_h=2, s_w=2, p_t=0, p_l=1, p_b=1, p_r=1)),
    ("conv2d", dict(h=17, w=17, c_in=16, c_out=16, k_h=1, k_w=7)),
    ("conv2d", dict(h=17, w=17, c_in=16, c_out=16, k_h=7, k_w=1, s_h=1, s_w=2)),
    ("conv2d", dict(h=16, w=16, c_in=32, c_out=64, k_h=3, k_w=3, groups=4)),
    ("conv2d", dict(h=24, w=24, c_in=8, c_out=8, k_h=3, k_w=3, d_h=2, d_w=2)),
    ("conv2d", dict(h=12, w=12, c_in=3, c_out=5, k_h=5, k_w=5, p_t=0, p_l=0, p_b=0, p_r=0, bias=0)),
    ("dwconv2d", dict(h=28, w=28, c=16, k_h=3, k_w=3)),
    ("dwconv2d", dict(h=28, w=28, c=16, k_h=5, k_w=5, s_h=2, s_w=2)),
    ("dwconv2d", dict(h=15, w=15, c=8, k_h=3, k_w=3, multiplier=2, d_h=2, d_w=2)),
    ("fc", dict(c_in=64, c_out=10)),
    ("fc", dict(c_in=7, c_out=300, bias=0)),
    ("maxpool", dict(h=32, w=32, c=8, k_h=3, k_w=3, s_h=2, s_w=2)),
    ("maxpool", dict(h=20, w=20, c=8, k_h=5, k_w=5)),
    ("avgpool", dict(h=32, w=32, c=8, k_h=2, k_w=2, s_h=2, s_w=2, p_t=0, p_l=0, p_b=0, p_r=0)),
    ("avgpool", dict(h=9, w=9, c=4, k_h=3, k_w=3, s_h=2, s_w=2)),
    ("globalpool", dict(h=7, w=7, c=32)),
    ("globalpool", dict(h=5, w=9, c=3, mode="max")),
    ("add", dict(h=14, w=14, c=24)),
    ("add", dict(h=14, w=14, c=24, broadcast=1)),
    ("mul", dict(h=14, w=14, c=24, broadcast=1)),
    ("mul", dict(h=10, w=6, c=4, broadcast=1, elems_b=1)),
    ("mul", dict(h=14, w=14, c=24)),
    ("concat", dict(h=10, w=10, c_in1=8, c_in2=24)),
    ("concat", dict(h=10, w=10, channels=[16, 16, 16, 16])),
    ("resize", dict(h=10, w=12, c=8, h_out=20, w_out=24)),
    ("resize", dict(h=10, w=12, c=8, h_out=7, w_out=30, mode="linear")),
    ("activation", dict(h=10, w=10, c=8, kind="relu")),
    ("activation", dict(h=10, w=10, c=8, kind="hardswish")),
    ("activation", dict(h=10, w=10, c=8, kind="silu")),
    ("activation", dict(h=10, w=10, c=8, kind="gelu")),
    ("activation", dict(h=10, w=10, c=8, kind="prelu")),
    ("activation", dict(h=10, w=10, c=8, kind=1)),  # relu6 by code
]
# the examples a type module gives of itself
CASES += [(t, dict(p)) for t, s in SPECS.items() for p in s.examples]


def _run(ir: ModelIR) -> np.ndarray:
    model = to_onnx(ir)
    onnx.checker.check_model(onnx.load_from_string(model), full_check=True)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    (out,) = sess.run(None, make_inputs(ir))
    return out


def test_cases_cover_every_benchable_type():
    assert set(BENCHABLE_TYPES) == {t for t, s in SPECS.items() if s.benchable}
    assert {t for t, _ in CASES} == set(BENCHABLE_TYPES)


@pytest.mark.parametrize("layer_type,params", CASES, ids=[f"{t}-{i}" for i, (t, _) in enumerate(CASES)])
def test_three_models_are_valid_and_have_expected_shapes(layer_type, params):
    expected = describe(layer_type, params).output_shape
    single = single_layer_model(layer_type, params)
    out = _run(single)
    assert out.shape == expected
    assert np.isfinite(out).all()

    padded = padded_model(layer_type, params)
    keys = padding_keys(layer_type, params)
    out_p = _run(padded)
    h_out, w_out, c_out = keys.output
    assert out_p.shape == (1, 1, h_out, w_out)
    # every graph input of the padded model has one channel (minimal data in)
    assert all(t.shape[:2] == (1, 1) for t in padded.inputs)
    # one pad-in conv per LUM input, with the channels of that input; one pad-out conv
    pad_in = [o for o in padded.ops if o.role == "pad_in"]
    pad_out = [o for o in padded.ops if o.role == "pad_out"]
    assert [(o.shape[2], o.shape[3], o.attrs["c_out"]) for o in pad_in] == list(keys.inputs)
    assert len(pad_out) == 1 and pad_out[0].attrs["c_in"] == c_out
    for o in pad_in + pad_out:
        assert o.kind == "conv" and (o.attrs["k_h"], o.attrs["k_w"]) == (1, 1) and o.act == "relu"
    assert padded.lum_op_names() == ("lum",)

    for key in keys.all():
        pm = padding_model(*key)
        assert _run(pm).shape == (1, 1, key[0], key[1])


def test_padding_model_structure():
    ir = padding_model(13, 7, 40)
    assert [(o.attrs["c_in"], o.attrs["c_out"]) for o in ir.ops] == [(1, 40), (40, 1)]
    assert ir.pad_key == (13, 7, 40) and ir.inputs[0].shape == (1, 1, 13, 7)


def test_padding_keys_for_multi_input_and_special_types():
    assert padding_keys("add", dict(h=8, w=9, c=5)).inputs == ((8, 9, 5), (8, 9, 5))
    k = padding_keys("mul", dict(h=8, w=9, c=5, broadcast=1))
    assert k.inputs == ((8, 9, 5), (1, 1, 5)) and k.output == (8, 9, 5)
    k = padding_keys("concat", dict(h=4, w=4, channels=[3, 5, 7]))
    assert k.inputs == ((4, 4, 3), (4, 4, 5), (4, 4, 7)) and k.output == (4, 4, 15)
    assert padding_keys("fc", dict(c_in=64, c_out=10)) == padding_keys("fc", dict(c_in=64, c_out=10))
    k = padding_keys("fc", dict(c_in=64, c_out=10))
    assert k.inputs == ((1, 1, 64),) and k.output == (1, 1, 10)
    k = padding_keys("globalpool", dict(h=7, w=7, c=32))
    assert k.inputs == ((7, 7, 32),) and k.output == (1, 1, 32)
    k = padding_keys("conv2d", dict(h=32, w=32, c_in=16, c_out=32, k_h=3, k_w=3, s_h=2, s_w=2))
    assert k.inputs == ((32, 32, 16),) and k.output == (16, 16, 32)
    # broadcast operand gets its own 1x1 graph input, the main one stays at h x w
    ir = padded_model("mul", dict(h=8, w=9, c=5, broadcast=1))
    assert sorted(t.shape for t in ir.inputs) == [(1, 1, 1, 1), (1, 1, 8, 9)]


def test_single_layer_conv_matches_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    for t, p in CASES:
        if t not in ("conv2d", "dwconv2d"):
            continue
        ir = single_layer_model(t, p)
        op = ir.op("lum")
        wts = make_weights(ir)["lum"]
        x = make_inputs(ir)["x0"]
        pt, pl, pb, pr = op.attrs["pads"]
        xt = F.pad(torch.from_numpy(x), (pl, pr, pt, pb))
        ref = F.conv2d(xt, torch.from_numpy(wts["w"]), torch.from_numpy(wts["b"]) if "b" in wts else None,
                       stride=(op.attrs["s_h"], op.attrs["s_w"]), dilation=(op.attrs["d_h"], op.attrs["d_w"]),
                       groups=op.attrs["groups"])
        ref = F.relu(ref).numpy()  # LUM_DEFAULT_ACT for conv types
        np.testing.assert_allclose(_run(ir), ref, rtol=1e-4, atol=1e-4)


def test_single_layer_pools_and_fc_match_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    ir = single_layer_model("maxpool", dict(h=9, w=9, c=4, k_h=3, k_w=3, s_h=2, s_w=2))
    x = torch.from_numpy(make_inputs(ir)["x0"])
    np.testing.assert_allclose(_run(ir), F.max_pool2d(x, 3, 2, padding=1).numpy(), rtol=1e-6)
    ir = single_layer_model("avgpool", dict(h=9, w=9, c=4, k_h=3, k_w=3, s_h=2, s_w=2))
    x = torch.from_numpy(make_inputs(ir)["x0"])
    ref = F.avg_pool2d(x, 3, 2, padding=1, count_include_pad=False).numpy()
    np.testing.assert_allclose(_run(ir), ref, rtol=1e-5, atol=1e-6)
    ir = single_layer_model("fc", dict(c_in=16, c_out=5))
    x = make_inputs(ir)["x0"].reshape(1, 16)
    w = make_weights(ir)["lum"]
    np.testing.assert_allclose(_run(ir), x @ w["w"].T + w["b"], rtol=1e-5, atol=1e-5)


def test_weights_and_inputs_are_deterministic_and_seeded():
    ir = padded_model("conv2d", dict(h=8, w=8, c_in=4, c_out=4, k_h=3, k_w=3))
    a, b = make_weights(ir, 0), make_weights(ir, 0)
    assert all(np.array_equal(a[k]["w"], b[k]["w"]) for k in a)
    assert not np.array_equal(make_weights(ir, 1)["lum"]["w"], a["lum"]["w"])
    assert to_onnx(ir) == to_onnx(ir)
    assert set(make_inputs(ir)) == {t.name for t in ir.inputs}


def test_ir_round_trips_through_json():
    for t, p in CASES[:: 3]:
        ir = padded_model(t, p)
        back = ModelIR.from_dict(json.loads(json.dumps(ir.to_dict())))
        assert back == ir


def test_same_pads_matches_tensorflow_rule():
    assert same_pads(224, 3, 2) == (0, 1)
    assert same_pads(224, 3, 1) == (1, 1)
    assert same_pads(7, 1, 1) == (0, 0)
    assert same_pads(17, 7, 1) == (3, 3)
    ir = single_layer_model("conv2d", dict(h=224, w=224, c_in=3, c_out=8, k_h=3, k_w=3, s_h=2, s_w=2,
                                           p_t=0, p_l=0, p_b=1, p_r=1))
    assert ir.op("lum").attrs["padding"] == "same"
    ir = single_layer_model("conv2d", dict(h=224, w=224, c_in=3, c_out=8, k_h=3, k_w=3, s_h=2, s_w=2))
    assert ir.op("lum").attrs["padding"] == "explicit"  # PyTorch-style symmetric pad 1


@pytest.mark.parametrize(
    "t,params,msg",
    [
        ("softmax", dict(h=2, w=2, c=3), "cannot be benchmarked"),
        ("layernorm", dict(rows=4, c=8, n=2), "batch 1"),
        ("mul", dict(h=4, w=4, c=8, broadcast=1, elems_b=3), "elems_b=3"),
        ("activation", dict(h=4, w=4, c=8, kind="other"), "cannot be benchmarked"),
        ("activation", dict(h=4, w=4, c=8, kind="nope"), "activation kind 'nope' unknown"),
        ("resize", dict(h=4, w=4, c=8, h_out=8, w_out=8, mode="area"), "resize mode"),
        ("conv2d", dict(h=4, w=4, c_in=8, c_out=8, k_h=3, k_w=3, n=2), "batch 1"),
        ("nope", dict(), "unknown layer type"),
    ],
)
def test_unbenchable_configs_have_precise_errors(t, params, msg):
    with pytest.raises(LayerSpecError, match=msg):
        padded_model(t, params)
