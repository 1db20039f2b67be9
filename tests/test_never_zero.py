"""No interval of a positive estimate reaches 0: every metric, every confidence level, layer
and network, on both shipped profiles, for every zoo network and 200 random layer
configurations (the multiplicative intervals of :mod:`estimator.aggregate`).

The models are the shipped profiles' own rows (a few hundred per type) with small forests,
so that training takes seconds; the profiles' network calibration applies where they have
one (``host-cpu``)."""
from __future__ import annotations

import pytest

from bench.sampling import SAMPLED_TYPES, sample_type
from estimator import zoo
from estimator.predict import Estimator, make_layer
from tests.shipped import small_models

CONFS = (0.5, 0.9, 0.99)
#: resolutions small enough to export quickly, large enough for each network's downsampling
RESOLUTION = {"deit_tiny": 224, "mobilevit_xs": 256, "efficientformer_l1": 224, "mobilenet_v4_conv_small": 224,
              "inception_v4": 107, "vgg16": 64, "densenet121": 64}


@pytest.fixture(scope="module", params=["host-cpu", "imx93"])
def est(request) -> Estimator:
    prof, models = small_models(request.param, 300)
    return Estimator(prof, models, n_samples=2000)


@pytest.fixture(scope="module")
def networks() -> dict[str, bytes]:
    out = {}
    for name in zoo.names():
        res = RESOLUTION.get(name, 64)
        out[f"{name}@{res}"] = zoo.export_onnx(name, res)
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
