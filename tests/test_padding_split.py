"""The padding split: which point of the Eq. 4 interval a smart-padding row trains on."""
from __future__ import annotations

import numpy as np
import pytest

from estimator.models import ModelError, TrainingOptions, prepare_training_data, train_models
from tests import synthetic

OPTS = dict(n_estimators=40, grid_estimators=20, grid_max_features=(1.0,), grid_min_samples_leaf=(3,))


def _rows():
    """Synthetic rows with T_c, T_b1 != T_b2 (interval [T_c - T_b2, T_c - T_b1])."""
    return synthetic.rows(60, seed=4, rel_width=0.4)


def _point(r, a):
    return r["t_padded_ms"] - a * r["t_b1_ms"] - (1 - a) * r["t_b2_ms"]


def test_half_is_the_eq4_midpoint():
    rs = _rows()
    d = prepare_training_data(rs)[0]["conv2d"]
    np.testing.assert_array_equal(d.mid, (d.lo + d.hi) / 2.0)  # bit for bit
    np.testing.assert_array_equal(d.mid, prepare_training_data(rs, padding_split_by_type={"conv2d": 0.5})[0]["conv2d"].mid)
    np.testing.assert_allclose(d.mid, [_point(r, 0.5) for r in rs], rtol=1e-12)


def test_one_trains_on_tc_minus_tb1_clipped_into_the_interval():
    rs = _rows()
    # an inconsistent row whose T_c - T_b1 lies above the stored interval, and one below 0
    rs[0] = dict(rs[0], t_b1_ms=rs[0]["t_b1_ms"] - 0.05)
    rs[1] = dict(rs[1], t_padded_ms=0.05, t_b1_ms=0.1, t_b2_ms=0.2, t_lum_lo_ms=-0.15, t_lum_hi_ms=-0.05,
                 t_single_ms=0.08)  # faster alone than its pads: it may cost nothing, kept at 0
    d = prepare_training_data(rs, padding_split_by_type={"conv2d": 1.0})[0]["conv2d"]
    base = prepare_training_data(rs)[0]["conv2d"]
    np.testing.assert_array_equal(d.lo, base.lo)  # the interval does not depend on the split
    np.testing.assert_array_equal(d.hi, base.hi)
    expect = [min(max(_point(r, 1.0), lo), hi) for r, lo, hi in zip(rs, d.lo, d.hi)]
    np.testing.assert_allclose(d.mid, expect, rtol=1e-12)
    assert d.mid[0] == d.hi[0] < _point(rs[0], 1.0)  # clipped to the upper end
    assert d.mid[1] == 0.0 and d.lo[1] == d.hi[1] == 0.0  # never negative
    np.testing.assert_allclose(d.mid[2:], [r["t_lum_hi_ms"] for r in rs[2:]], rtol=1e-12)  # T_c - T_b1 = hi here
    d0 = prepare_training_data(rs, padding_split_by_type={"conv2d": 0.0})[0]["conv2d"]
    np.testing.assert_allclose(d0.mid[2:], [r["t_lum_lo_ms"] for r in rs[2:]], rtol=1e-12)


def test_general_split_and_rows_without_padding_pairs():
    rs = _rows()
    rs[0] = {k: v for k, v in rs[0].items() if k not in ("t_b1_ms", "t_b2_ms")}
    rs[1] = dict(rs[1], t_b2_ms=float("nan"))
    d = prepare_training_data(rs, padding_split_by_type={"conv2d": 0.77})[0]["conv2d"]
    assert d.mid[0] == pytest.approx((d.lo[0] + d.hi[0]) / 2) and d.mid[1] == pytest.approx((d.lo[1] + d.hi[1]) / 2)
    np.testing.assert_allclose(d.mid[2:], [_point(r, 0.77) for r in rs[2:]], rtol=1e-12)
    assert np.all((d.lo <= d.mid) & (d.mid <= d.hi))
    # single-layer targets have no interval: the split does not apply
    s = prepare_training_data(rs, target="single", padding_split_by_type={"conv2d": 0.77})[0]["conv2d"]
    np.testing.assert_allclose(s.mid, [r["t_single_ms"] for r in rs])


def test_split_moves_the_target_and_the_scores_with_it():
    """alpha = 1 trains on T_c - T_b1, and the scores are the factor residuals at that point."""
    rs = synthetic.rows(120, seed=6, rel_width=0.4)
    m = train_models(rs, profile_name="a1", options=TrainingOptions(padding_split_by_type=(("conv2d", 1.0),), **OPTS))
    tm = m.types["conv2d"]
    d = prepare_training_data(rs, padding_split_by_type={"conv2d": 1.0})[0]["conv2d"]
    mid = (d.lo + d.hi) / 2
    assert not np.allclose(d.mid, mid)
    assert d.resolved.all()  # synthetic rows: no spread, every row above 0 ms
    floor = 0.5 * d.mid[d.mid > 0].min()
    r = np.expm1(np.abs(np.log(np.maximum(d.mid, floor) / d.ops / tm.t_scale) - tm.forest.oob_prediction_))
    y_hat = np.exp(tm.forest.oob_prediction_) * tm.t_scale * d.ops
    sig_lv = (np.sqrt(tm.var_de.apply()) * y_hat + tm.betas["CM_LV"]) / y_hat
    expect = np.sort((r / sig_lv)[d.hi > 0])
    np.testing.assert_allclose(tm.families["CM_LV"].scores, expect, rtol=1e-9)
    # ... and the forest saw the upper ends: its fit lies above the midpoint-trained forest's
    m5 = train_models(rs, profile_name="a5", options=TrainingOptions(**OPTS))
    t5 = m5.types["conv2d"]
    pred1 = y_hat
    pred5 = np.exp(t5.forest.oob_prediction_) * t5.t_scale * d.ops
    assert np.median(pred1 / mid) > np.median(pred5 / mid)


# ------------------------------------------------------------ per layer type


def test_per_type_split_moves_only_its_type():
    rs = synthetic.rows(40, seed=4, rel_width=0.4) + synthetic.rows(40, seed=5, layer_type="add", rel_width=0.4)
    d = prepare_training_data(rs, padding_split_by_type={"add": 1.0})[0]
    base = prepare_training_data(rs)[0]
    np.testing.assert_array_equal(d["conv2d"].mid, base["conv2d"].mid)  # the midpoint, bit for bit
    adds = [r for r in rs if r["layer_type"] == "add"]
    np.testing.assert_allclose(d["add"].mid, [min(max(_point(r, 1.0), lo), hi) for r, lo, hi in
                                              zip(adds, d["add"].lo, d["add"].hi)], rtol=1e-12)
    assert not np.array_equal(d["add"].mid, base["add"].mid)


def test_per_type_split_options_round_trip_and_refusals():
    assert "padding_split_by_type" not in TrainingOptions().to_dict()  # earlier cache keys stay valid
    o = TrainingOptions.from_dict({"padding_split_by_type": {"dwconv2d": 0.87, "add": 1}})
    assert o.padding_split_by_type == (("add", 1.0), ("dwconv2d", 0.87))
    assert o.to_dict()["padding_split_by_type"] == {"add": 1.0, "dwconv2d": 0.87}
    assert TrainingOptions.from_dict(o.to_dict()) == o and hash(o) == hash(TrainingOptions.from_dict(o.to_dict()))
    with pytest.raises(ModelError, match=r"padding_split_by_type: 'conv3d': 0.5 must map a layer type"):
        TrainingOptions.from_dict({"padding_split_by_type": {"conv3d": 0.5}})
    with pytest.raises(ModelError, match=r"padding_split_by_type: 'add': 1.5 must map a layer type to a split in \[0, 1\]"):
        TrainingOptions.from_dict({"padding_split_by_type": {"add": 1.5}})
    for bad in ([0.5], {"add": True}, 0.5):
        with pytest.raises(ModelError, match=r"training option 'padding_split_by_type' must be like \{\"dwconv2d\": 0.87\}"):
            TrainingOptions.from_dict({"padding_split_by_type": bad})


def test_lum_split_fit_on_known_rows():
    """tests/perf/padding_split.py --lum-types: the fit finds the split that reproduces T_lum."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("padding_split_perf", Path(__file__).parent / "perf" / "padding_split.py")
    ps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ps)
    assert ps.is_lum_op("lum/Relu;lum/Add") and ps.is_lum_op("lum/Mean_intermediate")
    assert not ps.is_lum_op("pad_in0/Relu;pad_in0/Conv2D") and not ps.is_lum_op("PartitionedCall:0_act")
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(40):
        b1, b2 = rng.uniform(0.1, 1.0, 2)
        t = rng.uniform(0.05, 0.5)
        tc = t + 0.8 * b1 + 0.2 * b2  # the pad-in side costs 80 % of T_b1, the pad-out side 20 % of T_b2
        lo, hi = sorted((tc - b1, tc - b2))
        rows.append(dict(t_c=tc, t_b1=b1, t_b2=b2, lo=max(lo, 0.0), hi=max(hi, 0.0), t_lum=t))
    assert ps.fit_split(rows) == pytest.approx(0.8)
    assert ps.split_error(rows, 0.8) == pytest.approx(0.0, abs=1e-12)
    assert ps.split_error(rows, 0.5) > 0.01
    zero = dict(rows[0], lo=0.0, hi=0.0)  # a point clipped to 0 ms counts as a 100 % error
    assert ps.split_error([zero], 0.5) == 1.0


def test_rows_whose_eq4_lost_a_layer_slower_than_its_pads_are_skipped_and_counted():
    """host-cpu's row of a 32-channel depthwise layer at 112x112 (padded model
    0.259 ms, padding pair 0.262 ms, alone 0.376 ms) trained at 0 and the layer was predicted
    at 0.017 ms; such rows are reported, not trained on. A row at 0 whose layer alone is faster
    than its pads stays (it may cost nothing)."""
    rs = _rows()
    lost = dict(rs[0], t_padded_ms=0.259, t_b1_ms=0.262, t_b2_ms=0.262, t_lum_lo_ms=-0.003, t_lum_hi_ms=-0.003,
                t_single_ms=0.376)
    free = dict(rs[1], t_padded_ms=0.259, t_b1_ms=0.262, t_b2_ms=0.262, t_lum_lo_ms=-0.003, t_lum_hi_ms=-0.003,
                t_single_ms=0.2)
    straddling = dict(rs[2], t_padded_ms=0.27, t_b1_ms=0.262, t_b2_ms=0.28, t_lum_lo_ms=-0.01, t_lum_hi_ms=0.008,
                      t_single_ms=0.376)  # some of the interval above 0: trained on as before
    data, report = prepare_training_data([lost, free, straddling] + rs[3:])
    d = data["conv2d"]
    assert len(d.mid) == len(rs) - 1
    assert report["skipped"] == {"conv2d: Eq. 4 lost the layer (T_LUM at or below 0 or its padded model's noise "
                                 "although it alone outlasts its padding pair)": 1}
    assert d.lo[0] == d.hi[0] == d.mid[0] == 0.0  # the free one, first now
    assert d.hi[1] == 0.008
    # single-layer targets do not use Eq. 4: every row stays
    assert len(prepare_training_data([lost, free, straddling] + rs[3:], target="single")[0]["conv2d"].mid) == len(rs)


def test_rows_within_their_padded_models_noise_measured_no_latency():
    """A row whose whole interval lies at or below its padded model's run-to-run spread
    (``padded_mad_ms``) measured no latency, as one at or below 0 ms: it trains at the
    type's floor, half its smallest measured latency, and scores nothing. Trained and scored
    at its own midpoint (1e-5 ms against neighbours near 0.1 ms), one such row of a 20-row
    profile took a ResNet's CM_LV upper bound to 9,000x its estimate. With weights and a
    layer alone slower than its pads, it is a row whose Eq. 4 lost the layer."""
    from estimator.models import TypeModel

    opts = TrainingOptions(**OPTS)
    rs = _rows()
    near = dict(rs[0], t_lum_lo_ms=-0.004, t_lum_hi_ms=2e-5, padded_mad_ms=0.007, t_single_ms=0.01,
                t_b1_ms=0.5, t_b2_ms=0.5)
    lost = dict(rs[1], t_lum_lo_ms=-0.004, t_lum_hi_ms=2e-5, padded_mad_ms=0.007, t_single_ms=0.9,
                t_b1_ms=0.5, t_b2_ms=0.5)
    above = dict(rs[2], padded_mad_ms=1e-4)  # its interval reaches above its spread: measured
    data, report = prepare_training_data([near, lost, above] + rs[3:])
    d = data["conv2d"]
    assert len(d.mid) == len(rs) - 1 and sum(report["skipped"].values()) == 1
    assert d.resolved.tolist() == [False] + [True] * (len(rs) - 2)
    _, _, t_scale, _, y_fit = TypeModel._targets(d, opts)
    floor = 0.5 * d.mid[1:].min()
    assert y_fit[0] == pytest.approx(np.log(floor / d.ops[0] / t_scale))
    tm = TypeModel.fit(d, opts)
    clean_data = prepare_training_data(rs[2:])[0]["conv2d"]
    clean = TypeModel.fit(clean_data, opts)
    # the grid search and the OOB report err relative to measured latencies only (against the
    # near row's 1e-5 ms, any prediction is off by a factor of thousands)
    worst = max(g["oob_rmspe"] for g in TypeModel.grid_search(clean_data, opts))
    assert max(g["oob_rmspe"] for g in TypeModel.grid_search(d, opts)) < 2 * worst
    assert tm.report["oob_rmspe"] < 2 * clean.report["oob_rmspe"] and tm.report["no_latency_rows"] == 1
    for m in ("CM_TV", "CM_LV", "CM_O"):
        assert tm.families[m].n == len(rs) - 2  # the near row scores nothing
        # its residual against its own midpoint would be a factor of about 10^4
        assert tm.families[m].scores.max() < 3 * clean.families[m].scores.max()
