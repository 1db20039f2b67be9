"""The sampling plan: reproducible, deduplicated, within limits, balanced across ops, and
wide enough for real CNNs."""
from __future__ import annotations

import numpy as np
import pytest

from bench.sampling import (
    SAMPLED_TYPES,
    SPACE_MAX,
    Limits,
    config_key,
    in_space,
    limits_for,
    make_plan,
    sample_type,
)
from estimator.layers import SPECS, describe
from bench.modelgen import lum_io_shapes

LIM = limits_for("onnxruntime")


def test_plan_is_reproducible_and_per_type_independent():
    a = make_plan(["conv2d", "add"], 30, seed=5, limits=LIM)
    b = make_plan(["conv2d", "add"], 30, seed=5, limits=LIM)
    assert [c.key for c in a] == [c.key for c in b] and len(a) == 60
    only_conv = {c.key for c in make_plan(["conv2d"], 30, seed=5, limits=LIM)}
    assert only_conv == {c.key for c in a if c.layer_type == "conv2d"}
    assert {c.key for c in make_plan(["conv2d"], 30, seed=6, limits=LIM)} != only_conv


def test_config_key_is_canonical():
    assert config_key("conv2d", dict(h=1, w=2)) == config_key("conv2d", dict(w=2, h=1))
    assert config_key("conv2d", dict(h=1, w=2)) != config_key("dwconv2d", dict(h=1, w=2))


@pytest.mark.parametrize("layer_type", SAMPLED_TYPES)
def test_samples_are_distinct_valid_and_within_limits(layer_type):
    lim = Limits(max_ops=5e8, max_elems=1 << 22, max_params=1 << 20)
    cs = sample_type(layer_type, 150, seed=1, limits=lim)
    assert len(cs) == 150 and len({c.key for c in cs}) == 150
    for c in cs:
        counts = describe(c.layer_type, c.params)
        assert c.ops == counts.ops and 1 <= c.ops <= lim.max_ops and counts.params <= lim.max_params
        ins, out = lum_io_shapes(c.layer_type, c.params)
        assert all(np.prod(s) <= lim.max_elems for s in (*ins, out))
        assert in_space(c.layer_type, c.params, lim)
        p = c.params
        assert max(p.get("h", 1), p.get("w", 1)) <= SPACE_MAX["hw"]
        assert max(p.get("k_h", 1), p.get("k_w", 1)) <= SPACE_MAX["k"]
        assert max(p.get("s_h", 1), p.get("s_w", 1)) <= 2


def test_balanced_across_log_ops():
    cs = sample_type("conv2d", 300, seed=2, limits=LIM, bins=10)
    lo = np.log10([c.ops for c in cs])
    hist, _ = np.histogram(lo, bins=10, range=(lo.min(), lo.max()))
    share = 300 / 10
    assert hist.max() <= 1.6 * share
    assert (hist >= 0.8 * share).sum() >= 8  # at most the sparse extreme bins fall short


def test_conv_space_has_the_variants_networks_use():
    cs = sample_type("conv2d", 400, seed=0, limits=LIM)
    ps = [c.params for c in cs]
    assert any(p["k_h"] != p["k_w"] for p in ps)  # asymmetric kernels
    assert any(p["s_h"] == 2 for p in ps)
    assert any(p.get("groups", 1) > 1 for p in ps)
    assert any(p.get("d_h", 1) > 1 for p in ps)
    assert any(p["p_t"] == 0 and p["k_h"] > 1 for p in ps)  # valid padding too


REAL_LAYERS = [
    ("conv2d", dict(h=224, w=224, c_in=3, c_out=64, k_h=7, k_w=7, s_h=2, s_w=2)),  # ResNet stem
    ("maxpool", dict(h=112, w=112, c=64, k_h=3, k_w=3, s_h=2, s_w=2)),  # ResNet
    ("conv2d", dict(h=7, w=7, c_in=512, c_out=2048, k_h=1, k_w=1)),  # ResNet-50 layer4
    ("conv2d", dict(h=14, w=14, c_in=256, c_out=256, k_h=3, k_w=3, groups=32)),  # ResNeXt
    ("globalpool", dict(h=7, w=7, c=2048)),
    ("fc", dict(c_in=2048, c_out=1000)),
    ("dwconv2d", dict(h=112, w=112, c=96, k_h=3, k_w=3, s_h=2, s_w=2)),  # MobileNetV2
    ("dwconv2d", dict(h=14, w=14, c=672, k_h=5, k_w=5)),  # EfficientNet
    ("mul", dict(h=14, w=14, c=1152, broadcast=1)),  # squeeze-excitation
    ("activation", dict(h=56, w=56, c=72, kind="hardswish")),  # MobileNetV3
    ("conv2d", dict(h=7, w=7, c_in=320, c_out=1280, k_h=1, k_w=1)),  # MobileNetV2 head
    ("conv2d", dict(h=17, w=17, c_in=192, c_out=192, k_h=1, k_w=7)),  # Inception
    ("conv2d", dict(h=640, w=640, c_in=3, c_out=32, k_h=6, k_w=6, s_h=2, s_w=2, p_t=2, p_l=2, p_b=2, p_r=2)),  # YOLOv5
    ("maxpool", dict(h=20, w=20, c=256, k_h=5, k_w=5)),  # YOLO SPPF
    ("concat", dict(h=20, w=20, channels=[256, 256, 256, 256])),  # YOLO SPPF
    ("resize", dict(h=20, w=20, c=512, h_out=40, w_out=40)),  # YOLO neck
    ("add", dict(h=56, w=56, c=256)),  # residual
]


@pytest.mark.parametrize("layer_type,params", REAL_LAYERS)
def test_realistic_cnn_layers_fall_inside_the_space(layer_type, params):
    assert in_space(layer_type, params, LIM)


#: Token-layout layers of the current zoo networks, as the importer describes them
#: (``estimator layers zoo:NAME``): each a row tensor of at most MAX_ROW_ELEMS elements,
#: whose rows or row length a map's channel and width caps would exceed.
TOKEN_LAYERS = [
    ("slice", dict(h=3, w=12608, c=3, elems_out=37824, n_outputs=1)),  # DeiT-Tiny q, k, v out of (3, 1, 3, 197, 64)
    ("transpose", dict(h=1, w=196, c=192, rank=3, moves_last=1)),  # DeiT-Tiny patches to tokens
    ("transpose", dict(h=16, w=2, c=3072, rank=4, moves_last=0)),  # MobileViT-XS unfolding
    ("slice", dict(h=4, w=6144, c=12, elems_out=98304, n_outputs=1)),  # MobileViT-XS q, k, v
    ("matmul", dict(b=16, m=256, k=24, n_cols=256)),  # MobileViT-XS q k^T: 4 patches x 4 heads
    ("softmax", dict(h=256, w=256, c=16, axis_len=256)),  # MobileViT-XS attention
    ("transpose", dict(h=1, w=49, c=448, rank=3, moves_last=1)),  # EfficientFormer-L1 to tokens
]


@pytest.mark.parametrize("layer_type,params", TOKEN_LAYERS)
def test_current_networks_token_layers_fall_inside_the_space(layer_type, params):
    assert in_space(layer_type, params, LIM)
    ins, out = lum_io_shapes(layer_type, params)
    assert all(int(np.prod(s)) <= SPACE_MAX["c"] * SPACE_MAX["hw"] for s in (*ins, out))


def test_the_network_prior_of_token_types_is_benchable():
    """The prior draws DeiT's and MobileViT's shapes; the space must not reject them (a
    map's channel and width caps on row tensors rejected 37 % of the slice prior, DeiT's
    q/k/v slices among them, so no profile had a row for them)."""
    for t in ("slice", "transpose", "matmul", "softmax"):  # before: 63, 77, 78 and 82 % of 400 draws
        r = np.random.default_rng(0)
        draws = [SPECS[t].draw(r, True) for _ in range(400)]
        assert sum(in_space(t, p, LIM) for p in draws) >= 0.85 * len(draws), t
    slices = sample_type("slice", 200, seed=0, limits=LIM, prior=True, bins=1, pool_factor=1)
    assert max(c.params["w"] for c in slices) > SPACE_MAX["hw"]


def test_a_row_tensor_over_the_element_cap_is_out_of_space():
    assert not in_space("matmul", dict(b=12, m=1024, k=64, n_cols=1024), LIM)  # 12.6 M scores
    assert not in_space("softmax", dict(h=1024, w=1024, c=12, axis_len=1024), LIM)


def test_out_of_space_is_detected():
    assert not in_space("conv2d", dict(h=2048, w=2048, c_in=3, c_out=8, k_h=3, k_w=3), LIM)
    assert not in_space("conv2d", dict(h=32, w=32, c_in=8, c_out=8, k_h=13, k_w=13), LIM)
    assert not in_space("conv2d", dict(h=32, w=32, c_in=8, c_out=8, k_h=3, k_w=3, s_h=4, s_w=4), LIM)
    assert not in_space("conv2d", dict(h=512, w=512, c_in=1024, c_out=1024, k_h=3, k_w=3), LIM)  # over max ops
    assert not in_space("softmax", dict(h=1, w=1, c=10), LIM)


def test_network_prior_adds_to_the_broad_plan_without_changing_it():
    types = ["conv2d", "dwconv2d", "maxpool", "mul"]
    broad = make_plan(types, 40, seed=0, limits=LIM)
    mixed = make_plan(types, 40, prior_samples=30, seed=0, limits=LIM)
    assert {c.key for c in broad} < {c.key for c in mixed}  # a broad-only database is resumed, not redone
    assert len(mixed) == len(broad) + 4 * 30
    assert [c.key for c in mixed] == [c.key for c in make_plan(types, 40, prior_samples=30, seed=0, limits=LIM)]
    prior = [c for c in mixed if c.key not in {b.key for b in broad}]
    assert all(in_space(c.layer_type, c.params, LIM) for c in prior)


def test_network_prior_draws_the_shapes_cnns_use():
    convs = sample_type("conv2d", 300, seed=0, limits=LIM, prior=True, bins=1, pool_factor=1)
    dws = sample_type("dwconv2d", 300, seed=0, limits=LIM, prior=True, bins=1, pool_factor=1)
    assert len(convs) == len(dws) == 300
    for c in convs + dws:
        p = c.params
        assert p["h"] == p["w"] <= 320 and p["s_h"] == p["s_w"] in (1, 2) and "d_h" not in p
        assert {p["k_h"], p["k_w"]} <= {1, 3, 5, 7}
    ks = [c.params["k_h"] for c in dws]
    assert ks.count(3) > ks.count(5) > ks.count(7) > 0  # the prior's density, not FLOPs-balanced
    # CNNs widen as they downsample: no 2048-channel 112x112 maps (+7: the off-ladder variant)
    assert all(c.params["c_out"] <= max(64, 14336 // c.params["h"]) + 7 for c in convs)


def test_network_prior_varies_the_fused_activation_and_groups():
    plan = make_plan(["conv2d", "dwconv2d", "add"], 0, prior_samples=300, seed=0, limits=LIM)
    acts = {t: {c.params.get("act") for c in plan if c.layer_type == t} for t in ("conv2d", "dwconv2d", "add")}
    assert {None, "relu6", "none"} <= acts["conv2d"] and {None, "relu6", "none"} <= acts["dwconv2d"]
    assert acts["add"] == {None, "none"}  # the LUM's default (ReLU) or a bare add
    assert any(c.params.get("groups", 1) > 1 for c in plan if c.layer_type == "conv2d")
    # the variant is a function of the configuration: the same plan every time
    again = make_plan(["conv2d", "dwconv2d", "add"], 0, prior_samples=300, seed=0, limits=LIM)
    assert [c.key for c in again] == [c.key for c in plan]


def _chans(c):
    return [c.params["c_in"], c.params["c_out"]] if c.layer_type == "conv2d" else [c.params["c"]]


def test_network_prior_moves_a_share_of_conv_channels_off_the_ladder(monkeypatch):
    """Channel counts are multiples of 8 (3 for stems) except for a hash-chosen share of
    the convolutions (ShuffleNetV2's 58, pruned networks): there, both counts that are
    multiples of 4 and counts that are not occur (ONNX Runtime's depthwise kernel is 5-10x
    slower per channel off multiples of 4). Adding the variant changed no other
    configuration: every on-ladder configuration has the key it had without it."""
    from estimator.layers import SPECS

    types = ["conv2d", "dwconv2d", "add"]
    plan = make_plan(types, 0, prior_samples=400, seed=0, limits=LIM)
    # (a residual add over token rows, (1, tokens, 1, width), counts tokens, not channels; an
    # add of a constant: the add's own variants)
    rows = [c for c in plan if c.layer_type == "add" and (c.params["h"] == 1 or c.params.get("const_b"))]
    plan = [c for c in plan if c not in rows]
    off = [c for c in plan if any(ch % 8 and ch != 3 for ch in _chans(c))]
    for t, share in (("conv2d", 0.15), ("dwconv2d", 0.25)):
        n_off = sum(c.layer_type == t for c in off)
        assert 0.5 * share * 400 <= n_off <= 1.5 * share * 400, (t, n_off)
    dw_off = [c.params["c"] for c in off if c.layer_type == "dwconv2d"]
    assert any(c % 4 == 0 for c in dw_off) and any(c % 2 for c in dw_off) and any(c % 4 == 2 for c in dw_off)
    assert any(c.params["c_in"] % 8 and c.params["c_in"] != 3 for c in off if c.layer_type == "conv2d")
    assert any(c.params["c_out"] % 8 for c in off if c.layer_type == "conv2d")
    assert not any(c.layer_type == "add" for c in off)  # element-wise types keep the ladder
    assert all(in_space(c.layer_type, c.params, LIM) for c in off)
    # the rest of the prior is the plan measured before the variant existed (the prior is
    # the first n distinct valid draws: an off-ladder variant over the limits or equal to
    # an earlier one makes the plan draw once more, so compare with a longer old plan)
    for t in ("conv2d", "dwconv2d"):
        monkeypatch.setattr(SPECS[t], "off_ladder_share", 0.0)
    monkeypatch.setattr(type(SPECS["add"]), "prior_variant", lambda self, p, unit: p)  # no add variants either
    old = make_plan(types, 0, prior_samples=400, seed=0, limits=LIM)
    assert not any(ch % 8 and ch != 3 for c in old for ch in _chans(c))
    before = {c.key for c in make_plan(types, 0, prior_samples=450, seed=0, limits=LIM)}
    on = {c.key for c in plan} - {c.key for c in off}
    assert on <= before
    assert len({c.key for c in old} - on) <= 1.1 * (len(off) + len(rows))


@pytest.mark.parametrize("layer_type", ["conv2d", "dwconv2d"])
def test_a_tflite_plan_draws_no_window_tensorflow_cannot_render(layer_type):
    """TensorFlow has no convolution that is dilated and strided at once: an ONNX plan draws
    such configurations, a TFLite plan never does (the converter would refuse each one)."""
    def both(c):
        p = c.params
        return max(p.get("d_h", 1), p.get("d_w", 1)) > 1 and max(p.get("s_h", 1), p.get("s_w", 1)) > 1

    assert any(both(c) for c in sample_type(layer_type, 600, seed=0))
    assert not any(both(c) for c in sample_type(layer_type, 600, seed=0, model_format="tflite"))
    from bench.modelgen import padded_model
    from estimator.layers import LayerSpecError

    one = next(c for c in sample_type(layer_type, 600, seed=0) if both(c))
    padded_model(layer_type, one.params)  # ONNX renders it
    with pytest.raises(LayerSpecError, match="no tflite rendering .TensorFlow, hence TFLite, has no convolution that "
                                             "is dilated and strided at once"):
        padded_model(layer_type, one.params, model_format="tflite")


def test_the_transpose_prior_has_mobilevit_patches():
    """MobileViT-XS unfolds its 96 x 32 x 32 map into 2x2 patches ((3072, 16, 2) rows swapped)
    and folds them back ((24576, 2, 2)); the prior draws those shapes, by hash, leaving the
    other draws' keys as they were."""
    prior = sample_type("transpose", 700, seed=0, limits=LIM, prior=True, bins=1, pool_factor=1)
    shapes = {(c.params["c"], c.params["h"], c.params["w"], c.params["moves_last"]) for c in prior}
    assert {(3072, 16, 2, 0), (24576, 2, 2, 0), (1920, 8, 2, 0), (7680, 2, 2, 0)} <= shapes
    token = [c for c in prior if c.params["w"] != 2 or c.params["c"] <= 192]
    assert len(token) >= 500  # the attention transposes stay most of the prior


def test_the_network_prior_measures_constant_operands():
    """Networks multiply and add constants (standalone batch norms, layer and attention scales,
    shifts): the prior draws them, so a profile of the default plan has rows of their kind
    instead of flagging such layers ``unbenchmarked:const_b``."""
    plan = make_plan(["mul", "add"], 0, prior_samples=400, seed=0, limits=LIM)
    mul = [c.params for c in plan if c.layer_type == "mul"]
    const = [p for p in mul if p.get("const_b")]
    assert 0.15 * len(mul) <= len(const) <= 0.35 * len(mul)
    assert any(p.get("batchnorm") for p in const) and any(p.get("elems_b") == 1 for p in const)
    assert any(p.get("elems_b") == p["c"] and not p.get("batchnorm") for p in const)
    assert any(c.params.get("const_b") for c in plan if c.layer_type == "add")
    assert all(in_space(c.layer_type, c.params, LIM) for c in plan)
