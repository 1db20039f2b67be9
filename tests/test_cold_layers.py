"""Weight-bound layers predicted cold in networks too big for the last-level cache
(``bench profile --cold-from``, :meth:`estimator.predict.Estimator.cold_network_bytes`), on
synthetic rows (tests/synthetic.py: a known latency function, not measurements)."""
from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from estimator.layers import describe, weight_bound
from estimator.fingerprint import cache_bytes
from estimator.predict import Estimator
from estimator.profile import load_profile
from tests import synthetic


def _conv_net(c: int = 128, h: int = 8) -> bytes:
    """One 3x3 convolution, c -> c on an h x h map (weight-bound at 8x8, 128 channels; not at
    32x32, 32 channels)."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [c, c, 3, 3], [0.01] * (c * c * 9))
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv")
    g = helper.make_graph([node], "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, h, h])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _rows_warm_and_cold() -> tuple[list[dict], list[dict]]:
    """Synthetic conv2d rows, and their weight-bound ones again as cold rows 3x slower."""
    warm = synthetic.rows(300, seed=3, c_max=160)
    cold = [dict(r, params={**r["params"], "cold": 1}, t_lum_ms=3 * r["t_lum_ms"], t_lum_lo_ms=3 * r["t_lum_lo_ms"],
                 t_lum_hi_ms=3 * r["t_lum_hi_ms"], t_padded_ms=3 * r["t_padded_ms"])
            for r in warm if weight_bound(describe("conv2d", r["params"]))]
    return warm, cold


def test_weight_bound_is_weights_against_input_and_output():
    assert weight_bound(describe("fc", dict(c_in=1280, c_out=1000)))
    assert weight_bound(describe("conv2d", dict(h=4, w=4, c_in=256, c_out=256, k_h=3, k_w=3)))
    assert not weight_bound(describe("conv2d", dict(h=32, w=32, c_in=32, c_out=32, k_h=3, k_w=3)))
    assert describe("fc", dict(c_in=8, c_out=8, cold=1)).features["cold"] == 1.0
    assert [cache_bytes(s) for s in ("32768K", "32M", "480 MiB", "", "?")] == [32 << 20, 32 << 20, 480 << 20, 0, 0]


@pytest.mark.parametrize("l3, cold", [("64K", True), ("1024M", False)])
def test_a_network_bigger_than_half_the_cache_reads_weight_bound_layers_cold(tmp_path, l3, cold):
    warm, cold_rows = _rows_warm_and_cold()
    assert len(cold_rows) >= 20
    fp = {"host": {"caches": {"L3": l3}}}
    synthetic.write_profile(tmp_path, "both", warm + cold_rows, fingerprint=fp)
    synthetic.write_profile(tmp_path, "warm", warm, fingerprint=fp)
    net = _conv_net()  # 147,456 weights: 576 KiB, above half of 64 KiB, below half of 1 GiB
    both = Estimator.from_profile(load_profile("both", tmp_path), cache_root=tmp_path / "cache")
    only = Estimator.from_profile(load_profile("warm", tmp_path), cache_root=tmp_path / "cache")
    assert only.cold_network_bytes() is None  # no cold rows: the feature is not learnt, nothing changes
    assert both.cold_network_bytes() == cache_bytes(l3) / 2
    p_both = both.estimate_network(net, [0.9]).layers[0]
    p_warm = only.estimate_network(net, [0.9]).layers[0]
    assert p_both.features["cold"] == (1.0 if cold else 0.0)
    assert ("weights_cold" in p_both.flags) == cold and "weights_cold" not in p_warm.flags
    ratio = p_both.prediction_ms / p_warm.prediction_ms
    assert (ratio > 2.0) if cold else (0.7 < ratio < 1.4)
    assert onnx.load_from_string(net).graph.node[0].name == "conv"


@pytest.mark.parametrize("l3, cold", [("2M", True), ("64M", False)])
def test_the_maps_count_toward_the_network_that_outgrows_the_cache(tmp_path, l3, cold):
    """A weight-bound layer (576 KiB of weights) after a convolution on a 64x64 map (2.1 MiB of
    input and output, few weights): the weights alone fit in half a 2 MiB cache, weights and
    maps do not, so the weight-bound layer runs cold there; the map's layer never does (it is
    not weight-bound)."""
    from estimator.predict import make_layer

    warm, cold_rows = _rows_warm_and_cold()
    synthetic.write_profile(tmp_path, "both", warm + cold_rows, fingerprint={"host": {"caches": {"L3": l3}}})
    est = Estimator.from_profile(load_profile("both", tmp_path), cache_root=tmp_path / "cache")
    big_map = make_layer("conv2d", dict(h=64, w=64, c_in=8, c_out=64, k_h=3, k_w=3), "map")
    heavy = make_layer("conv2d", dict(h=8, w=8, c_in=128, c_out=128, k_h=3, k_w=3), "heavy")
    assert heavy.n_params * 4 < cache_bytes("2M") / 2 < big_map.bytes + heavy.bytes
    assert est.network_runs_cold([big_map, heavy]) == cold and not est.network_runs_cold([heavy])
    ctx = est.context_layers([big_map, heavy])
    assert [l.features.get("cold", 0.0) for l in ctx] == [0.0, 1.0 if cold else 0.0]
    assert ("weights_cold" in ctx[1].flags) == cold and not ctx[0].flags


def test_a_pruning_table_judges_cold_at_each_channel_count(tmp_path):
    """In a network that outgrows the cache, the latency model predicts a layer cold at the
    channel counts where it is weight-bound, and warm where pruning has made it stream its maps
    instead (128 -> 128 at 8x8: weight-bound; 128 -> 4: not)."""
    from estimator.pruning import LatencyModel

    warm, cold_rows = _rows_warm_and_cold()
    synthetic.write_profile(tmp_path, "both", warm + cold_rows, fingerprint={"host": {"caches": {"L3": "64K"}}})
    est = Estimator.from_profile(load_profile("both", tmp_path), cache_root=tmp_path / "cache")
    lm = LatencyModel(est, _conv_net())
    assert not weight_bound(describe("conv2d", dict(h=8, w=8, c_in=128, c_out=4, k_h=3, k_w=3)))
    full, pruned = lm.layer(0, c_out=128), lm.layer(0, c_out=4)
    assert "weights_cold" in full.flags and "weights_cold" not in pruned.flags
    assert full.ms == pytest.approx(est.estimate_network(_conv_net(), [0.9]).total_ms, rel=1e-6)
