"""The fast estimation path (the default) against the reference path (``fast=False``).

The reference path is the straightforward code: ONNX shape inference with constant
folding, scikit-learn's and crepes' public ``predict``/``apply``/``predict_int`` per layer
type, Monte Carlo blocks drawn afresh. The fast path must give the same numbers: 1e-9 relative on totals,
per-layer predictions and every interval (in practice it is bit for bit equal except for the
Monte Carlo summation order). The models are trained here from a sample of the measured
host-cpu profile (real rows; reduced forests so that training takes seconds).
"""
from __future__ import annotations

import io
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from estimator import aggregate as aggregate_mod
from estimator import fastpath, onnx_import, zoo
from estimator.aggregate import SLOT_BLOCK, DistBatch, Family, SampleBank, aggregate
from estimator.fastpath import FastKNN, FlatForests
from estimator.models import METRICS, DeviceModels
from estimator.onnx_import import ImpossibleShapeError, OnnxImportError, load_network
from estimator.onnx_shapes import propagate_shapes
from estimator.predict import Estimator, make_layer
from tests.shipped import small_models

sys.path.insert(0, str(Path(__file__).resolve().parent / "perf"))
from service_common import mbv2_like_onnx, random_layer_specs  # noqa: E402

CONFS = [0.8, 0.9, 0.95]
REL = 1e-9


def _close(a, b, what: str) -> None:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    assert a.shape == b.shape, what
    assert np.array_equal(np.isnan(a), np.isnan(b)), what
    m = ~np.isnan(a)
    err = np.abs(a[m] - b[m]) / np.maximum(np.abs(b[m]), 1e-300)
    assert err.size == 0 or err.max() <= REL, f"{what}: max relative difference {err.max():.3g}"


@pytest.fixture(scope="module")
def est() -> Estimator:
    """Real measurements (200 rows per type of the host-cpu profile), small forests."""
    prof, trained = small_models("host-cpu", 200)
    assert {"conv2d", "dwconv2d", "add", "fc", "globalpool", "maxpool", "concat", "resize"} <= set(trained.types)
    # as the model cache stores and loads them: the arrays through an .npz, read without
    # unpickling; the scikit-learn/crepes objects (the reference path) handed over when asked
    buf = io.BytesIO()
    np.savez(buf, **trained.arrays())
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    models = DeviceModels.from_arrays(arrays, lambda t, _: trained.types[t].reference)
    return Estimator(prof, models, n_samples=2000)


def _export(name: str, res: int) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(zoo.build(name, res).eval(), (torch.zeros(1, 3, res, res),), buf, dynamo=False,
                          opset_version=17, do_constant_folding=True, input_names=["input"], output_names=["output"])
    return buf.getvalue()


#: the zoo's attention and hybrid networks at the resolutions the service sees them
ATTENTION_ZOO = {"deit_tiny": 224, "mobilevit_xs": 256, "efficientformer_l1": 224, "mobilenet_v4_conv_small": 224}


@pytest.fixture(scope="module")
def zoo_models() -> dict[str, bytes]:
    from service.client import strip_initializers

    out = {}
    for name, res in [("mobilenet_v2", 64), ("shufflenet_v2", 64), ("yolov5s", 96), ("squeezenet", 96),
                      ("densenet121", 64), ("efficientnet_b0", 64), *ATTENTION_ZOO.items()]:
        data = _export(name, res)
        out[name] = data
        out[name + ":stripped"] = strip_initializers(data).SerializeToString()
    return out


# --------------------------------------------------------------------------- forests


def test_flat_forest_equals_sklearn_predict_bit_for_bit(est: Estimator, monkeypatch) -> None:
    rng = np.random.default_rng(3)
    types = sorted(est.models.types)
    forests = FlatForests.from_forests({t: est.models.types[t].forest for t in types})
    parts = []
    for t in types:
        m = est.models.types[t]
        thr = np.concatenate([e.tree_.threshold[e.tree_.feature >= 0] for e in m.forest.estimators_])
        feat = np.concatenate([e.tree_.feature[e.tree_.feature >= 0] for e in m.forest.estimators_])
        lo, hi = m.feat_min, m.feat_max
        X = lo + (hi - lo) * rng.random((120, lo.size)) * 1.3
        # values exactly at thresholds, and one float32 step either side (sklearn compares in float32)
        pick = rng.integers(0, thr.size, 60)
        X[:60, feat[pick]] = thr[pick]
        X[60:90, feat[pick[:30]]] = np.nextafter(thr[pick[:30]].astype(np.float32), np.float32(np.inf))
        X[90:120, feat[pick[30:]]] = np.nextafter(thr[pick[30:]].astype(np.float32), np.float32(-np.inf))
        parts.append((t, X))
    got = forests.tree_predictions(parts)
    for (t, X), P in zip(parts, got):
        ref = np.stack([e.tree_.predict(X.astype(np.float32)).reshape(len(X), -1)[:, 0]
                        for e in est.models.types[t].forest.estimators_])
        np.testing.assert_array_equal(P, ref)
        np.testing.assert_array_equal(P, np.stack([e.predict(X) for e in est.models.types[t].forest.estimators_]))
    # large batches walk in blocks of trees and rows (and small parts in groups): the same numbers
    for lanes in (1, 7 * 30, 31 * 30 + 5):
        monkeypatch.setattr(fastpath, "WALK_LANES", lanes)
        big = [(t, np.repeat(X, 3, axis=0)) for t, X in parts[:3]] + [(parts[3][0], parts[3][1][:2])]
        for (t, X), P in zip(big, forests.tree_predictions(big)):
            np.testing.assert_array_equal(P, np.stack([e.predict(X) for e in est.models.types[t].forest.estimators_]))
    # the model set's own arrays (what the cache stores) are these
    for t in types:
        np.testing.assert_array_equal(est.models.forests.roots[t], forests.roots[t])
    np.testing.assert_array_equal(est.models.forests.nodes.view(np.int64), forests.nodes.view(np.int64))


def test_knn_difficulty_is_crepes_bit_for_bit(est: Estimator) -> None:
    rng = np.random.default_rng(4)
    for t, m in sorted(est.models.types.items()):
        knn = FastKNN.from_estimator(m.knn_de)
        np.testing.assert_array_equal(knn.Y, m.knn.Y)
        train = (m.knn_de.nn._fit_X - knn.min) / knn.scale  # the benchmarked feature vectors
        X = train[rng.integers(0, len(train), 300)]
        X[100:200] *= 1 + 0.05 * rng.standard_normal((100, X.shape[1]))
        X[200:] *= 1 + 3 * rng.random((100, X.shape[1]))  # far outside the benchmarked range
        np.testing.assert_array_equal(knn.apply(X), np.asarray(m.knn_de.apply(X), dtype=float))


# ------------------------------------------------------------------------ layer batches


def _random_layers(n: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    layers = [make_layer(s["type"], s["params"], s["name"]) for s in random_layer_specs(rng, n)]
    extra = [
        ("maxpool", dict(h=28, w=28, c=64, k_h=3, k_w=3, s_h=2, s_w=2)),
        ("avgpool", dict(h=14, w=14, c=32, k_h=2, k_w=2, s_h=2, s_w=2)),
        ("concat", dict(h=14, w=14, channels=[32, 64, 16])),
        ("mul", dict(h=7, w=7, c=96, broadcast=1, elems_b=96)),
        ("resize", dict(h=10, w=10, c=64, h_out=20, w_out=20, mode="nearest")),
        ("conv2d", dict(h=14, w=14, c_in=64, c_out=64, k_h=3, k_w=3, n=4)),  # batch > 1
        ("conv2d", dict(h=900, w=900, c_in=2048, c_out=2048, k_h=7, k_w=7)),  # far outside the design space
        # the token-layout and attention types; those a profile has no rows for fall back to the roofline
        ("layernorm", dict(rows=197, c=192)), ("reshape", dict(h=7, w=7, c=320)), ("transpose", dict(h=28, w=28, c=58, rank=5)),
        ("softmax", dict(h=1, w=1, c=1000, axis_len=1000)), ("pad", dict(h=28, w=28, c=16, h_out=30, w_out=30)),
        ("slice", dict(h=28, w=28, c=116, elems_out=28 * 28 * 58)), ("matmul", dict(m=64, k=64, n_cols=196)),
        ("other", dict(h=20, w=20, c=255, elems_out=20 * 20 * 255)),
    ]
    layers += [make_layer(t, p, f"x{i}") for i, (t, p) in enumerate(extra)]
    order = rng.permutation(len(layers))
    return [layers[i] for i in order]


@pytest.mark.parametrize("n", [40, 700])
def test_batch_prediction_fast_equals_reference(est: Estimator, n: int) -> None:
    layers = _random_layers(n, seed=n)
    assert {l.type for l in layers} >= set(est.models.types) | {"reshape", "other"}
    fast, ref = est.predict_batch(layers, fast=True), est.predict_batch(layers, fast=False)
    _close(fast.pred_ms, ref.pred_ms, "pred_ms")
    _close(fast.t_op_ms, ref.t_op_ms, "t_op_ms")
    np.testing.assert_array_equal(fast.fallback, ref.fallback)
    np.testing.assert_array_equal(fast.out_of_design_space, ref.out_of_design_space)
    assert fast.reasons == ref.reasons
    assert any("knn" in r for r in ref.reasons) and any("batch" in r for r in ref.reasons)
    assert any(r and r[0] == "no_data" for r in ref.reasons)
    for m in METRICS:
        a, b = fast.dists[m], ref.dists[m]
        _close(a.center, b.center, f"{m} center")
        _close(a.scale, b.scale, f"{m} scale")
        np.testing.assert_array_equal(a.family, b.family)
        assert all(x is y for x, y in zip(a.families, b.families)) and len(a.families) == len(b.families)
    rows_f = est.estimate_layers(layers, CONFS, fast=True)
    rows_r = est.estimate_layers(layers, CONFS, fast=False)
    _compare_rows(rows_f, rows_r, "layer batch")


def test_reference_intervals_beyond_the_calibration_set_use_the_largest_score(est: Estimator) -> None:
    """At a confidence that 200 calibration rows cannot certify, crepes' predict_int gives an
    infinite interval; both paths use the largest score instead (and warn)."""
    layers = _random_layers(40, seed=11)
    c = 0.999
    rows_f, warn_f = est.estimate_layers_with_warnings(layers, [c], fast=True)
    rows_r, warn_r = est.estimate_layers_with_warnings(layers, [c], fast=False)
    assert warn_f == warn_r and any("0.999" in w for w in warn_f), warn_f
    for lf, lr in zip(rows_f, rows_r):
        for m in METRICS:
            assert np.isfinite(lr.intervals[m][c]).all()
            _close(lf.intervals[m][c], lr.intervals[m][c], f"{lf.name} {m}")


def test_row_cache_answers_repeated_layers_with_the_same_numbers(est: Estimator) -> None:
    """Feature rows seen before come from FastModels' row cache: the same numbers as a cold
    evaluation and as the reference path, whatever else the batch holds; the cache is bounded."""
    from estimator.fastpath import FastModels

    layers = _random_layers(120, seed=3)
    ref = est.predict_batch(layers, fast=False)
    fm = FastModels(est.models, row_cache_size=50)
    cold = fm.predict_layers(layers)
    assert 0 < len(fm._row_cache) <= 50
    fm.row_cache_size = 10_000
    fm.predict_layers(layers[::-1])  # every row now cached, filled from a batch in another order
    n_rows = len(fm._row_cache)
    warm = fm.predict_layers(layers)
    assert len(fm._row_cache) == n_rows  # every row was a hit
    sub = [l for l in layers if l.type != "fc"][:7] + [make_layer("fc", {"c_in": 64, "c_out": 10}, "alone")]
    assert sum(l.type == "fc" for l in sub) == 1  # fc alone of its type in this batch
    for batch, r in ((cold, ref), (warm, ref), (fm.predict_layers(sub), est.predict_batch(sub, fast=False))):
        _close(batch.pred_ms, r.pred_ms, "pred_ms")
        _close(batch.t_op_ms, r.t_op_ms, "t_op_ms")
        assert batch.reasons == r.reasons
        for m in METRICS:
            _close(batch.dists[m].scale, r.dists[m].scale, f"{m} scale")
            _close(batch.dists[m].center, r.dists[m].center, f"{m} center")
    # a warm (cached) row is bit for bit the cold evaluation
    np.testing.assert_array_equal(warm.pred_ms, cold.pred_ms)
    for m in METRICS:
        np.testing.assert_array_equal(warm.dists[m].scale, cold.dists[m].scale)


# ----------------------------------------------------------------------- Monte Carlo


def test_sample_bank_gives_the_reference_totals() -> None:
    rng = np.random.default_rng(5)
    fams = [Family("log", np.abs(rng.standard_normal(300)), name="conv2d:CM_TV"),
            Family("mult", np.exp(0.3 * rng.standard_normal(40)), name="fallback:CM_TV"),
            Family("log", [0.1, 0.5, 2.0]), Family("log", [0.2, 0.3], name="conv2d:CM_TV")]  # unnamed, repeated
    n = 3 * SLOT_BLOCK + 5
    dist = DistBatch(rng.random(n) * 3, rng.random(n), rng.integers(0, len(fams), n), fams)
    ref = dist.sum_samples(3000, seed=11)
    for bank in (SampleBank(), SampleBank(max_bytes=SLOT_BLOCK * 3000 * 4)):  # room for one block only
        for _ in range(2):  # the second time from kept blocks (or drawn again after eviction)
            for shared in (False, True):
                _close(bank.sum_samples(dist, 3000, seed=11, shared=shared),
                       dist.sum_samples(3000, seed=11, shared=shared), f"bank totals shared={shared}")
        assert bank.nbytes <= bank.max_bytes
    _close(dist.sample(3000, seed=11).sum(axis=0), ref, "per-layer draws")
    # layers that share a scale (a network's repeated blocks) are summed by distinct scale
    rep = DistBatch(rng.random(n) * 3, rng.choice([0.05, 0.2, 0.7], n), rng.integers(0, len(fams), n), fams)
    _close(SampleBank().sum_samples(rep, 3000, seed=11, shared=True), rep.sum_samples(3000, seed=11, shared=True),
           "bank totals, repeated scales")
    assert not np.allclose(dist.sum_samples(3000, seed=12), ref)
    # the draws of a family do not depend on the other families in the batch
    only = dist.take(np.flatnonzero(dist.family == 0))
    sub = DistBatch(only.center, only.scale, np.zeros(len(only), dtype=int), [fams[0]])
    _close(sub.sample(3000, seed=11), dist.sample(3000, seed=11)[dist.family == 0], "slot stability")
    a, _ = aggregate(dist, CONFS, n_samples=3000, seed=11)
    b, _ = aggregate(dist, CONFS, n_samples=3000, seed=11, bank=SampleBank())
    for c in CONFS:
        _close([a[c].lower, a[c].upper], [b[c].lower, b[c].upper], f"aggregate {c}")


def _native_mc():
    try:
        from estimator import native_mc as mod
    except ImportError as e:
        why = f"estimator.native_mc is not built ({e}); pip builds it where a C compiler exists"
        if os.environ.get("CL_REQUIRE_NATIVE") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return mod


def test_shared_log_totals_agree_with_and_without_the_native_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _native_mc()
    rng = np.random.default_rng(8)
    fams = [Family("log", np.abs(rng.standard_normal(500)), name="conv2d:CM_LV"),
            Family("log", np.abs(rng.standard_normal(64)), name="fc:CM_LV"),
            Family("mult", np.exp(0.3 * rng.standard_normal(40)), name="fallback:CM_LV")]
    n = 5 * SLOT_BLOCK
    # repeated scales (identical blocks), one-layer families, layers out of family order
    dist = DistBatch(rng.random(n) * 3, rng.choice([0.05, 0.2, 0.7, rng.random()], n), rng.integers(0, 3, n), fams)
    ref = dist.sum_samples(4000, seed=3, shared=True)
    native = SampleBank().sum_samples(dist, 4000, seed=3, shared=True)
    monkeypatch.setattr(aggregate_mod, "_native_mc", None)
    numpy_path = SampleBank().sum_samples(dist, 4000, seed=3, shared=True)
    _close(native, ref, "native kernel")
    _close(numpy_path, ref, "numpy path")
    # the kernel refuses bad input before it writes anything
    total = np.zeros(4)
    tables = [fams[0].table(), fams[1].table()]
    ok = np.zeros(4, dtype=np.int32)
    bad = np.array([0, 1, tables[1].size, 2], dtype=np.int32)
    rows = np.array([0, 2, 2, 3], dtype=np.intp)
    with pytest.raises(IndexError, match=f"family 1: slot {tables[1].size} outside its {tables[1].size} outcomes"):
        mod.add_shared_log(total, tables, [ok, bad], np.ones(3), np.ones(3), rows)
    with pytest.raises(ValueError, match="differ in length"):
        mod.add_shared_log(total, tables, [ok, ok], np.ones(3), np.ones(2), rows)
    with pytest.raises(ValueError, match="outside 0..3"):
        mod.add_shared_log(total, tables, [ok, ok], np.ones(3), np.ones(3), np.array([0, 2, 2, 4], dtype=np.intp))
    assert not total.any()
    mod.add_shared_log(total, tables, [ok, ok], np.ones(3), np.ones(3), rows)
    assert total.all()


# ------------------------------------------------------------------------- networks


def _compare_estimates(fast, ref, what: str) -> None:
    _close(fast.total_ms, ref.total_ms, f"{what} total")
    assert fast.confidence == ref.confidence == CONFS
    for m in METRICS:
        for c in CONFS:
            _close(fast.intervals[m][c], ref.intervals[m][c], f"{what} {m} {c}")
    _compare_rows(fast.layers, ref.layers, what)
    assert fast.warnings == ref.warnings and fast.free_nodes == ref.free_nodes


def _compare_rows(fast, ref, what: str) -> None:
    assert len(fast) == len(ref) > 0
    for lf, lr in zip(fast, ref):
        assert (lf.name, lf.type, lf.flags, lf.ood_reasons, lf.fallback, lf.features) == (
            lr.name, lr.type, lr.flags, lr.ood_reasons, lr.fallback, lr.features), what
        _close(lf.prediction_ms, lr.prediction_ms, f"{what} {lf.name}")
        _close(np.nan if lf.t_op_ms is None else lf.t_op_ms, np.nan if lr.t_op_ms is None else lr.t_op_ms,
               f"{what} {lf.name} t_op")
        for m in METRICS:
            for c in CONFS:
                _close(lf.intervals[m][c], lr.intervals[m][c], f"{what} {lf.name} {m} {c}")


@pytest.mark.parametrize("name", ["mobilenet_v2", "shufflenet_v2", "yolov5s", "squeezenet", "densenet121",
                                  "efficientnet_b0", *ATTENTION_ZOO])
def test_zoo_network_estimates_fast_equal_reference(est: Estimator, zoo_models: dict[str, bytes], name: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    for key in (name + ":stripped", name):
        data = zoo_models[key]
        with monkeypatch.context() as mp:  # the fast path propagates every shape itself
            mp.setattr(onnx_import, "_infer_shapes", _no_reference_shapes)
            fast = est.estimate_network(data, CONFS, fast=True)
        ref = est.estimate_network(data, CONFS, fast=False)
        _compare_estimates(fast, ref, key)
        # the same layers, with every count and shape, from both importers
        nf, nr = est.load_network(data, fast=True), est.load_network(data, fast=False)
        assert [l.to_dict() for l in nf.layers] == [l.to_dict() for l in nr.layers]
        assert nf.outputs == nr.outputs and nf.simplified == nr.simplified
        assert nf.free_nodes == nr.free_nodes and nf.warnings == nr.warnings
        # value_info is filled when the record is read
        assert {v.name for v in nf.model.graph.value_info} == {v.name for v in nr.model.graph.value_info}


def _no_reference_shapes(*args, **kwargs):
    raise AssertionError("the fast path ran ONNX shape inference")


def test_mbv2_like_stream_networks_fast_equal_reference(est: Estimator) -> None:
    rng = np.random.default_rng(7)
    for _ in range(4):
        data = mbv2_like_onnx(rng)
        _compare_estimates(est.estimate_network(data, CONFS, fast=True), est.estimate_network(data, CONFS, fast=False),
                           "mbv2-like")
    threaded = Estimator(est.profile, est.models, n_samples=est.n_samples, mc_threads=3)
    assert threaded.estimate_network(data, CONFS).intervals == est.estimate_network(data, CONFS).intervals
    per_layer_off = est.estimate_network(data, CONFS, per_layer=False)
    assert per_layer_off.layers == [] and per_layer_off.n_layers > 0
    assert per_layer_off.total_ms == est.estimate_network(data, CONFS).total_ms


# ------------------------------------------------------------------- ONNX importer


def _graph(nodes, x_shape, inits=(), opset=17, outputs=("y",)) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _w(name: str, dims: list[int]) -> TensorProto:
    t = TensorProto()
    t.name, t.data_type = name, TensorProto.FLOAT
    t.dims.extend(dims)
    return t


def _i64(name: str, values: list[int]) -> TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def _single_op_graphs() -> list[onnx.ModelProto]:
    out = []
    rng = np.random.default_rng(8)
    for _ in range(60):  # windows: every padding mode, ceil mode, dilation
        k, s, p, d = (int(v) for v in (rng.integers(1, 6), rng.integers(1, 4), rng.integers(0, 3), rng.integers(1, 3)))
        hw = int(rng.integers(k * d + 1, 40))
        auto = str(rng.choice(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
        pads = {"pads": [p, p + 1, p, p]} if auto == "NOTSET" else {}
        out.append(_graph([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[k, k], strides=[s, s],
                                            dilations=[d, d], auto_pad=auto, **pads)], [1, 8, hw, hw + 3],
                          [_w("w", [4, 8, k, k])]))
        out.append(_graph([helper.make_node(str(rng.choice(["MaxPool", "AveragePool"])), ["x"], ["y"],
                                            kernel_shape=[k, k], strides=[s, s], ceil_mode=int(rng.integers(0, 2)),
                                            **({"pads": [min(p, k - 1)] * 4} if auto == "NOTSET" else {}),
                                            auto_pad=auto)], [1, 8, hw, hw + 1]))
    x = [1, 6, 10, 12]
    out += [
        _graph([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest")], x,
               [helper.make_tensor("sc", TensorProto.FLOAT, [4], [1, 1, 2.0, 1.5])]),
        _graph([helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="linear")], x, [_i64("sz", [1, 6, 7, 31])]),
        _graph([helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], x,
               [_i64("st", [-1, 1]), _i64("en", [-100, 11]), _i64("ax", [2, 3]), _i64("sp", [-2, 3])]),
        _graph([helper.make_node("Reshape", ["x", "sh"], ["y"])], x, [_i64("sh", [0, 3, -1, 12])]),
        _graph([helper.make_node("Split", ["x", "sp"], ["a", "b"], axis=1)], x, [_i64("sp", [2, 4])],
               outputs=("a", "b")),
        _graph([helper.make_node("Pad", ["x", "pd"], ["y"])], x, [_i64("pd", [0, 0, 1, 2, 0, 0, 3, 4])]),
        _graph([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], x),
        _graph([helper.make_node("Flatten", ["x"], ["y"], axis=2)], x),
        _graph([helper.make_node("Unsqueeze", ["x", "ax"], ["u"]), helper.make_node("Squeeze", ["u", "ax"], ["y"])],
               x, [_i64("ax", [-1])]),
        _graph([helper.make_node("MatMul", ["x", "m"], ["y"])], x, [_w("m", [12, 5])]),
        _graph([helper.make_node("Flatten", ["x"], ["f"]), helper.make_node("Gemm", ["f", "g"], ["y"], transB=1)],
               x, [_w("g", [10, 720])]),
        _graph([helper.make_node("Concat", ["x", "x"], ["y"], axis=-1)], x),
        _graph([helper.make_node("Add", ["x", "b"], ["y"])], x, [_w("b", [6, 1, 1])]),
        _graph([helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=0)], x),
        _graph([helper.make_node("Softmax", ["x"], ["y"], axis=1)], x),
        # torch-style shape arithmetic: Shape -> Gather -> Div -> Unsqueeze -> Concat -> Reshape
        _graph([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i1"], ["c"], axis=0),
                helper.make_node("Div", ["c", "two"], ["h"]), helper.make_node("Unsqueeze", ["h", "a0"], ["hu"]),
                helper.make_node("Concat", ["one", "two1", "hu", "m1"], ["shp"], axis=0),
                helper.make_node("Reshape", ["x", "shp"], ["y"])], x,
               [helper.make_tensor("i1", TensorProto.INT64, [], [1]),
                helper.make_tensor("two", TensorProto.INT64, [], [2]),
                _i64("a0", [0]), _i64("one", [1]), _i64("two1", [2]), _i64("m1", [-1])]),
    ]
    return out


def _norm(shapes) -> dict:
    return {k: tuple(v) for k, v in shapes.items() if v is not None}


def test_shape_propagation_equals_onnx_inference(zoo_models: dict[str, bytes]) -> None:
    models = [onnx.load_from_string(d) for d in zoo_models.values()] + _single_op_graphs()
    handled = 0
    for m in models:
        onnx_import._fix_inputs(m, None)
        fast = propagate_shapes(m)
        if fast is None:
            continue
        handled += 1
        assert _norm(fast) == _norm(onnx_import._infer_shapes(m, [], fold=True)), m.graph.name
    assert handled == len(models)  # every one of them is handled by the fast path (none fell back)


def test_shape_propagation_falls_back_on_unknown_ops_and_unsorted_graphs() -> None:
    m = _graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Einsum", ["r"], ["y"], equation="ij->ji")],
               [3, 4])
    assert propagate_shapes(m) is None
    net = load_network(m)  # the importer then uses ONNX shape inference
    assert [l.type for l in net.layers] == ["activation", "other"]
    unsorted = _graph([helper.make_node("Relu", ["r"], ["y"], name="second"),
                       helper.make_node("Sigmoid", ["x"], ["r"], name="first")], [1, 4, 8, 8])
    assert propagate_shapes(unsorted) is None
    assert [l.to_dict() for l in load_network(unsorted).layers] == \
        [l.to_dict() for l in load_network(unsorted, fast=False).layers]


@pytest.mark.parametrize("fast", [True, False])
def test_impossible_windows_and_groups_raise_a_dedicated_error(fast: bool) -> None:
    conv = lambda name, x, w, **kw: helper.make_node("Conv", [x, w], [name], name=name, **kw)  # noqa: E731
    deep = _graph([conv("c1", "x", "w1", strides=[2, 2]), helper.make_node("Relu", ["c1"], ["r"], name="r"),
                   conv("c2", "r", "w2")], [1, 3, 12, 12], [_w("w1", [8, 3, 3, 3]), _w("w2", [8, 8, 7, 7])],
                  outputs=("c2",))
    with pytest.raises(ImpossibleShapeError, match=r"node 'c2' \(Conv\): the 7x7 window .* does not fit the 5x5 input"):
        load_network(deep, fast=fast)
    pool = _graph([helper.make_node("MaxPool", ["x"], ["y"], name="p", kernel_shape=[5, 5], strides=[2, 2])],
                  [1, 3, 4, 4])
    with pytest.raises(ImpossibleShapeError, match=r"node 'p' \(MaxPool\): the 5x5 window .* does not fit the 4x4"):
        load_network(pool, fast=fast)
    groups = _graph([conv("g", "x", "w", group=4)], [1, 6, 8, 8], [_w("w", [8, 1, 3, 3])], outputs=("g",))
    with pytest.raises(ImpossibleShapeError, match=r"node 'g' \(Conv\): group=4 does not divide the 6 input channels"):
        load_network(groups, fast=fast)
    for w, group in (([16, 5, 3, 3], 1), ([16, 8, 3, 3], 2)):  # input channels per group: 8, then 4
        weights = _graph([conv("k", "x", "w", group=group)], [1, 8, 15, 15], [_w("w", w)], outputs=("k",))
        with pytest.raises(ImpossibleShapeError, match=rf"node 'k' \(Conv\): the weight {'x'.join(map(str, w))} "
                                                       rf"\(group={group}\) does not fit the input 1x8x15x15"):
            load_network(weights, fast=fast)
    assert issubclass(ImpossibleShapeError, OnnxImportError)


def _with_weights(data: bytes) -> onnx.ModelProto:
    m = onnx.load_from_string(data)
    rng = np.random.default_rng(9)
    for t in m.graph.initializer:
        if onnx_import._dataless(t):
            t.raw_data = rng.standard_normal(int(np.prod(t.dims))).astype(np.float32).tobytes()
    return m


def test_models_that_need_no_simplification_skip_onnxsim(monkeypatch: pytest.MonkeyPatch) -> None:
    full = _with_weights(mbv2_like_onnx(np.random.default_rng(10)))
    ref = load_network(full, fast=False)  # through onnxsim
    assert ref.simplified
    calls = []
    real = onnx_import._run_onnxsim
    monkeypatch.setattr(onnx_import, "_run_onnxsim", lambda *a, **k: calls.append(1) or real(*a, **k))
    fast = load_network(full)
    assert calls == [] and fast.simplified and not fast.warnings
    assert [l.to_dict() for l in fast.layers] == [l.to_dict() for l in ref.layers]
    assert fast.free_nodes == ref.free_nodes
    # a graph with something to fold (Constant nodes, as torch exports Clip bounds) still goes through onnxsim
    load_network(_export("mobilenet_v2", 32))
    assert calls == [1]


def test_initializer_info_reads_what_is_dataless_reads() -> None:
    from estimator.onnx_shapes import initializer_info, is_dataless

    def t(name: str, dims: list[int], **fields) -> TensorProto:
        x = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
        for k, v in fields.items():
            if k == "raw_data":
                x.raw_data = v
            elif k == "data_location":
                x.data_location = v
            else:
                getattr(x, k).extend(v)
        return x

    inits = [t("stripped", [4, 3]), t("raw", [2], raw_data=np.ones(2, np.float32).tobytes()), t("empty_raw", [2], raw_data=b""),
             t("floats", [2], float_data=[1.0, 2.0]), t("ints", [1], int64_data=[3]), t("zero", [0, 3]),
             t("scalar", []), t("external", [5], data_location=TensorProto.EXTERNAL),
             t("ext_with_raw", [1], raw_data=b"\0\0\0\0", data_location=TensorProto.EXTERNAL)]
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], inits))
    info = initializer_info(m)
    assert [(i[1], i[2], i[3]) for i in info] == [(x.name, tuple(x.dims), x.data_type) for x in m.graph.initializer]
    assert [i[4] for i in info] == [is_dataless(x) for x in m.graph.initializer] == \
        [True, False, True, False, False, False, True, True, True]
    assert all(i[0] is not None for i in info)
