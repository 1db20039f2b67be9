"""No interval of a positive estimate reaches 0: every metric, every confidence level, layer
and network, on both shipped profiles, for every zoo network and 200 random layer
configurations (the multiplicative intervals of :mod:`estimator.aggregate`).

The models are the shipped profiles' own rows (a few hundred per type) with small forests,
so that training takes seconds; the profiles' network calibration applies where they have
one (``host-cpu``)."""
from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.sampling import SAMPLED_TYPES, sample_type
from estimator import zoo
from estimator.models import TrainingOptions, train_models
from estimator.predict import Estimator, make_layer
from estimator.profile import load_profile

REPO = Path(__file__).resolve().parents[1]
CONFS = (0.5, 0.9, 0.99)
#: resolutions small enough to export quickly, large enough for each network's downsampling
RESOLUTION = {"deit_tiny": 224, "mobilevit_xs": 256, "efficientformer_l1": 224, "mobilenet_v4_conv_small": 224,
              "inception_v4": 107, "vgg16": 64, "densenet121": 64}


@pytest.fixture(scope="module", params=["host-cpu", "imx93"])
def est(request) -> Estimator:
    prof = load_profile(request.param, root=REPO / "profiles")
    by: dict[str, list] = {}
    for r in prof.rows():
        by.setdefault(r["layer_type"], []).append(r)
    rng = np.random.default_rng(0)
    rows = [rs[i] for t, rs in sorted(by.items()) for i in rng.choice(len(rs), min(len(rs), 300), replace=False)]
    opts = TrainingOptions(n_estimators=30, grid_estimators=20, grid_max_features=(0.6,), grid_min_samples_leaf=(1,))
    models = train_models(rows, profile_name=prof.name, precision=prof.precision, options=opts)
    return Estimator(prof, models, n_samples=2000)


@pytest.fixture(scope="module")
def networks() -> dict[str, bytes]:
    out = {}
    for name in zoo.names():
        res = RESOLUTION.get(name, 64)
        buf = io.BytesIO()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(zoo.build(name, res).eval(), (torch.zeros(1, 3, res, res),), buf, dynamo=False,
                              opset_version=17, do_constant_folding=True, input_names=["input"],
                              output_names=["output"])
        out[f"{name}@{res}"] = buf.getvalue()
    return out


def _positive(intervals, what: str) -> None:
    for m, per in intervals.items():
        for c, (lo, hi) in per.items():
            assert 0 < lo <= hi, f"{what}: {m} {c} [{lo}, {hi}]"


def test_zoo_networks_never_get_a_lower_bound_of_zero(est: Estimator, networks: dict[str, bytes]) -> None:
    for name, onnx_bytes in networks.items():
        for calibrate in (True, False):
            r = est.estimate_network(onnx_bytes, CONFS, name=name, calibrate=calibrate)
            assert r.total_ms > 0, name
            _positive(r.intervals, f"{est.profile.name} {name} calibrate={calibrate}")
            for layer in r.layers:
                if layer.prediction_ms > 0:
                    _positive(layer.intervals, f"{est.profile.name} {name} {layer.name}")


def test_random_layer_configurations_never_get_a_lower_bound_of_zero(est: Estimator) -> None:
    per_type = -(-200 // len(SAMPLED_TYPES))
    layers = [make_layer(c.layer_type, c.params) for t in SAMPLED_TYPES
              for c in sample_type(t, per_type, seed=1, bins=1, pool_factor=1)]
    assert len(layers) >= 200
    rows = est.estimate_layers(layers, CONFS)
    assert all(r.prediction_ms > 0 for r in rows)
    for r in rows:
        _positive(r.intervals, f"{est.profile.name} {r.type} {r.name}")
