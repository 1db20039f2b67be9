"""A layer whose operation no benchmarked row had is flagged, never silently predicted as the
rows' operation (``unbenchmarked:<feature>``, :data:`estimator.models.FLAGGED_WHEN_FIXED`).

The model of a type leaves out a feature every row of the type holds at one value (the forest
cannot learn from a constant column), so without the flag a concatenation whose inputs other
layers also read, on a profile that measured none, was predicted as a plain one, in the design
space. Runs on the shipped ``host-cpu``: its concatenation rows have no shared input, while its
element-wise rows include constant operands (standalone batch normalisations, scales).
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from estimator.drivers import _why
from estimator.models import FLAGGED_WHEN_FIXED
from estimator.predict import Estimator, make_layer

PROFILES = Path(__file__).resolve().parents[1] / "profiles"


@pytest.fixture(scope="module")
def est() -> Estimator:
    return Estimator.from_profile("host-cpu", root=PROFILES)


def _layers():
    return [make_layer("concat", dict(h=28, w=28, channels=[64, 64], shared=[0]), "dense_concat"),
            make_layer("concat", dict(h=28, w=28, channels=[64, 64]), "plain_concat"),
            make_layer("mul", dict(h=28, w=28, c=64, broadcast=1, elems_b=64, const_params=128, const_b=1,
                                   batchnorm=1), "batchnorm"),
            make_layer("mul", dict(h=28, w=28, c=64, broadcast=1, elems_b=1, const_b=1), "scale")]


def test_the_shipped_rows_decide_what_is_flagged(est: Estimator) -> None:
    types = est.models.types
    assert types["concat"].fixed == {"c_shared": 0.0}  # no concatenation row had a shared input
    assert "c_shared" not in types["concat"].feature_names
    assert "const_b" in types["mul"].feature_names and "batchnorm" in types["mul"].feature_names
    assert not types["mul"].fixed and set(FLAGGED_WHEN_FIXED) >= {"const_b", "batchnorm", "c_shared"}


@pytest.mark.parametrize("fast", [True, False])
def test_a_shared_concat_is_outside_the_design_space_on_both_paths(est: Estimator, fast: bool) -> None:
    layers = _layers()
    out = est.predict_batch(layers, fast=fast)
    reasons = dict(zip((l.name for l in layers), out.reasons))
    assert "unbenchmarked:c_shared" in reasons["dense_concat"] and out.out_of_design_space[0]
    assert not any(r.startswith("unbenchmarked:") for r in reasons["plain_concat"])
    # measured kinds: a batch normalisation and a scalar scale are predicted from their own rows
    assert not any(r.startswith("unbenchmarked:") for n in ("batchnorm", "scale") for r in reasons[n])
    # the prediction itself is the plain concatenation's: the model cannot see the feature
    assert out.pred_ms[0] == pytest.approx(out.pred_ms[1])


def test_the_flag_reaches_the_layer_rows_and_says_why(est: Estimator) -> None:
    layers = _layers()
    res = est.estimate_network(SimpleNamespace(layers=layers, warnings=[], free_nodes={}, name="n"), 0.9,
                               per_layer=True)
    row = next(r for r in res.layers if r.name == "dense_concat")
    assert row.out_of_design_space and "unbenchmarked:c_shared" in row.ood_reasons
    assert res.n_out_of_design_space >= 1
    why = _why(layers[0], row.ood_reasons, [], None)
    assert "c_shared=64: no benchmarked concat row has it" in why
