import pytest

from estimator.layers import LAYER_TYPES, LayerSpecError, describe, feature_vector


def test_conv_counts_match_hand_count():
    c = describe("conv2d", dict(h=224, w=224, c_in=3, c_out=64, k_h=7, k_w=7, s_h=2, s_w=2, bias=0))
    assert c.output_shape == (1, 64, 112, 112)
    assert c.macs == 112 * 112 * 64 * 3 * 49
    assert c.params == 64 * 3 * 49
    assert c.ops == 2 * c.macs


def test_grouped_and_dilated_conv():
    c = describe("conv2d", dict(h=32, w=32, c_in=64, c_out=128, k_h=3, k_w=3, groups=4, d_h=2, d_w=2))
    assert c.output_shape == (1, 128, 32, 32)
    assert c.macs == 32 * 32 * 128 * 16 * 9
    assert c.features["dilation"] == 2 and c.features["groups"] == 4


def test_every_type_has_features_in_order():
    for t in LAYER_TYPES:
        assert describe  # vocabulary has a spec for each type
    v = feature_vector("dwconv2d", describe("dwconv2d", dict(h=8, w=8, c=4, k_h=3, k_w=5)).features)
    assert len(v) == 12 and v[-2] == -1.0 and v[-1] == 4.0  # act: none; c_align of c=4


def test_channel_alignment_features():
    """Power-of-two alignment of the channel counts (at most 16): CPU kernels vectorise
    over channels, and ONNX Runtime's depthwise kernel is several times slower per channel
    off multiples of 4."""
    dw = lambda c: describe("dwconv2d", dict(h=28, w=28, c=c, k_h=3, k_w=3)).features["c_align"]  # noqa: E731
    assert [dw(c) for c in (58, 116, 232, 24, 3, 1, 2048)] == [2, 4, 8, 8, 1, 1, 16]
    f = describe("conv2d", dict(h=14, w=14, c_in=232, c_out=58, k_h=1, k_w=1)).features
    assert (f["c_in_align"], f["c_out_align"]) == (8, 2)
    g = describe("conv2d", dict(h=14, w=14, c_in=96, c_out=192, k_h=3, k_w=3, groups=4)).features
    assert (g["c_in_align"], g["c_out_align"]) == (8, 16)  # per group: 24 and 48


@pytest.mark.parametrize(
    "t,params,msg",
    [
        ("conv2d", dict(h=2, w=2, c_in=3, c_out=4, k_h=7, k_w=7, p_t=0, p_b=0, p_l=0, p_r=0), "does not fit"),
        ("conv2d", dict(h=8, w=8, c_in=3, c_out=4, k_h=3, k_w=3, groups=2), "groups=2"),
        ("conv2d", dict(h=8, w=8, c_in=3, k_h=3, k_w=3), "missing parameter 'c_out'"),
        ("nope", dict(), "unknown layer type"),
        ("fc", dict(c_in=-1, c_out=3), ">= 1"),
    ],
)
def test_bad_specs_have_precise_errors(t, params, msg):
    with pytest.raises(LayerSpecError, match=msg):
        describe(t, params)


def test_fused_activation_is_a_feature_and_benchmark_rows_carry_their_lum_default():
    from estimator.layers import bench_params

    conv = dict(h=8, w=8, c_in=8, c_out=8, k_h=3, k_w=3)
    code = {a: describe("conv2d", dict(conv, act=a)).features["act"] for a in ("relu", "relu6", "none", None)}
    assert code == {"relu": 0.0, "relu6": 1.0, "none": -1.0, None: -1.0}
    assert describe("conv2d", conv).features["act"] == -1.0  # an imported layer without a fused activation
    # a benchmark row without act was measured with its LUM's default (conv: ReLU, fc: none)
    assert bench_params("conv2d", conv)["act"] == "relu" and bench_params("fc", dict(c_in=4, c_out=4))["act"] == "none"
    assert bench_params("conv2d", dict(conv, act="relu6"))["act"] == "relu6"
    assert "act" not in bench_params("maxpool", dict(h=8, w=8, c=4, k_h=2, k_w=2))
    with pytest.raises(LayerSpecError, match="unknown activation 'swoosh'"):
        describe("dwconv2d", dict(h=8, w=8, c=4, k_h=3, k_w=3, act="swoosh"))
