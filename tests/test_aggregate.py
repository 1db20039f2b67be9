"""Network-level aggregation (Eq. 8): Monte Carlo convolution of per-layer predictive distributions."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from crepes import ConformalRegressor

from estimator.aggregate import DistBatch, Family, aggregate, conformal_index, layer_intervals


def _uniform_family(n: int = 2000) -> Family:
    # |U| for U ~ Uniform[-1, 1]: scores (k - 0.5) / n, k = 1..n
    return Family("log", (np.arange(1, n + 1) - 0.5) / n)


def _batch(n_layers: int, fam: Family, center: float = 10.0, scale: float = 1.0) -> DistBatch:
    return DistBatch(np.full(n_layers, center), np.full(n_layers, scale), np.zeros(n_layers, dtype=int), [fam])


def test_one_layer_is_a_factor_and_two_layers_of_one_type_move_together():
    # Y = 10 (1 + 0.5 |U|)^sign(U), U ~ U[-1, 1]: the c interval is [10 / (1 + 0.5 c), 10 (1 + 0.5 c)]
    res, _ = aggregate(_batch(1, _uniform_family(), scale=0.5), [0.5, 0.9], n_samples=200_000, seed=1)
    for c in (0.5, 0.9):
        assert res[c].lower == pytest.approx(10 / (1 + 0.5 * c), rel=2e-3)
        assert res[c].upper == pytest.approx(10 * (1 + 0.5 * c), rel=2e-3)
    # coupled by type, two layers take the same draw: [20 / 1.45, 20 x 1.45]
    res, _ = aggregate(_batch(2, _uniform_family(), scale=0.5), [0.9], n_samples=200_000, seed=1, coupling="type")
    assert res[0.9].lower == pytest.approx(20 / 1.45, rel=2e-3)
    assert res[0.9].upper == pytest.approx(20 * 1.45, rel=2e-3)


def test_many_layers_approach_the_normal_convolution():
    n, s = 50, 0.2
    res, samples = aggregate(_batch(n, _uniform_family(), scale=s), [0.9], n_samples=100_000, seed=3,
                             return_samples=True)
    # one layer, V ~ U[0, 1]: half the time 10 (1 + s V), half 10 / (1 + s V)
    m_up, m_dn = 1 + s / 2, math.log1p(s) / s  # E[1 + sV], E[1 / (1 + sV)]
    q_up, q_dn = 1 + s + s * s / 3, 1 / (1 + s)  # E[(1 + sV)^2], E[(1 + sV)^-2]
    mean = 10 * (m_up + m_dn) / 2
    sd = math.sqrt(n * (100 * (q_up + q_dn) / 2 - mean ** 2))
    assert samples.mean() == pytest.approx(n * mean, rel=1e-3)
    assert samples.std() == pytest.approx(sd, rel=0.01)
    assert res[0.9].upper - n * mean == pytest.approx(1.6449 * sd, rel=0.03)


def _exact_cdf(layers: list[tuple[np.ndarray, np.ndarray]], x: float) -> float:
    """Exact P(sum <= x) by enumerating every combination of discrete layer values."""
    p = 0.0
    for combo in itertools.product(*[list(zip(v, w)) for v, w in layers]):
        if sum(v for v, _ in combo) <= x + 1e-12:
            p += math.prod(w for _, w in combo)
    return p


def _support(fam: Family, center: float, scale: float) -> tuple[np.ndarray, np.ndarray]:
    n = fam.n
    w = np.full(n, 1.0 / (n + 1))
    w[-1] = 2.0 / (n + 1)  # P(K <= k) = k / (n+1) for k < n; the top score takes the rest
    if fam.kind == "mult":
        return scale * fam.scores, w
    vals = np.concatenate([center / (1 + scale * fam.scores), center * (1 + scale * fam.scores)])
    return vals, np.concatenate([w, w]) / 2


def test_mixed_families_match_an_exact_discrete_convolution():
    log = Family("log", [0.1, 0.4, 0.5, 1.3])
    mult = Family("mult", [0.8, 1.0, 1.1, 2.5, 3.0])
    dist = DistBatch([5.0, 2.0, 3.0], [0.5, 0.25, 2.0], [0, 0, 1], [log, mult])
    _, samples = aggregate(dist, [0.9], n_samples=200_000, seed=7, return_samples=True)
    exact = [_support(log, 5.0, 0.5), _support(log, 2.0, 0.25), _support(mult, 0.0, 2.0)]
    for x in (6.0, 8.0, 9.5, 11.0, 13.0):
        assert np.mean(samples <= x) == pytest.approx(_exact_cdf(exact, x), abs=0.005)


def _far_from_jumps(n: int, c: float) -> float:
    """Distance of the interval's quantile levels from the discrete distribution's jumps."""
    levels = [c * (n + 1), (1 - c) / 2 * (n + 1), (1 + c) / 2 * (n + 1)]
    return min(abs(x - round(x)) for x in levels) / (n + 1)


@pytest.mark.parametrize("kind", ["log", "mult"])
@pytest.mark.parametrize("confidence", [0.8, 0.9, 0.95])
def test_single_layer_network_reproduces_the_layer_interval(kind, confidence):
    # pick n so Monte Carlo noise cannot land the quantile on the wrong side of a jump
    n = max(range(40, 90), key=lambda m: _far_from_jumps(m, confidence))
    assert _far_from_jumps(n, confidence) > 0.002
    rng = np.random.default_rng(0)
    scores = np.abs(rng.standard_normal(n)) if kind == "log" else np.exp(rng.standard_normal(n) * 0.3)
    fam = Family(kind, scores)
    dist = DistBatch([3.0], [0.7], [0], [fam])
    lo, hi = layer_intervals(dist, confidence)
    res, _ = aggregate(dist, [confidence], n_samples=200_000, seed=11)
    assert res[confidence].lower == pytest.approx(lo[0], rel=1e-12)
    assert res[confidence].upper == pytest.approx(hi[0], rel=1e-12)


@pytest.mark.parametrize("confidence", [0.5, 0.8, 0.9, 0.95])
def test_layer_intervals_equal_crepes_predict_int(confidence):
    rng = np.random.default_rng(4)
    residuals = rng.standard_normal(99) * 3
    sigmas = rng.random(99) + 0.1
    cr = ConformalRegressor().fit(residuals, sigmas=sigmas)
    y_hat = rng.random(20) * 10 + 1e-3
    s_test = rng.random(20) + 0.1
    half = cr.predict_int(np.zeros(20), sigmas=s_test, confidence=confidence)[:, 1]  # q * sigma
    dist = DistBatch(y_hat, s_test, np.zeros(20, dtype=int), [Family("log", cr.alphas)])
    lo, hi = layer_intervals(dist, confidence)
    np.testing.assert_allclose(lo, y_hat / (1 + half))
    np.testing.assert_allclose(hi, y_hat * (1 + half))


def test_more_layers_narrow_the_relative_width():
    fam = Family("log", np.abs(np.random.default_rng(1).standard_normal(200)))
    widths = []
    for n in (1, 4, 16, 64):
        res, _ = aggregate(_batch(n, fam, center=10.0, scale=0.2), [0.9], n_samples=20_000, seed=5)
        widths.append((res[0.9].upper - res[0.9].lower) / (10.0 * n))
    assert widths[0] > widths[1] > widths[2] > widths[3]
    # independent errors: relative width ~ 1/sqrt(n)
    assert widths[3] == pytest.approx(widths[1] / 4, rel=0.15)


def test_deterministic_for_a_fixed_seed():
    fam = Family("log", [0.5, 1.0, 2.0, 4.0])
    dist = DistBatch([1.0, 0.5], [1.0, 1.0], [0, 0], [fam])
    a, sa = aggregate(dist, [0.9], seed=3, return_samples=True)
    b, sb = aggregate(dist, [0.9], seed=3, return_samples=True)
    assert a == b and np.array_equal(sa, sb)
    _, sc = aggregate(dist, [0.9], seed=4, return_samples=True)
    assert not np.array_equal(sa, sc)


@pytest.mark.parametrize("coupling", ["independent", "type"])
def test_a_positive_estimate_never_gets_a_lower_bound_of_zero(coupling):
    """Scores a hundred times wider than any type's: the additive band would reach far
    below 0 (10 - 3.3 x 2 x 10 per layer); the band of factors stays positive, layer and network."""
    fam = Family("log", np.linspace(0.0, 10.0, 101))
    dist = DistBatch([10.0, 1e-4, 3.0], [2.0, 2.0, 0.5], [0, 0, 0], [fam])
    for c in (0.5, 0.9, 0.99):
        lo, hi = layer_intervals(dist, c)
        assert np.all(lo > 0) and np.all(hi > dist.center)
        assert np.allclose(lo * hi, dist.center ** 2)  # log-symmetric around the estimate
        res, samples = aggregate(dist, [c], seed=1, coupling=coupling, return_samples=True)
        assert samples.min() > 0 and 0 < res[c].lower < res[c].upper


def test_conformal_index_and_uncertified_levels():
    assert conformal_index(57, 0.9) == 52  # ceil(0.9 * 58) = 53rd smallest
    assert conformal_index(57, 0.05) == 2  # ceil(0.05 * 58) = 3rd smallest
    assert conformal_index(9, 0.95) == 8  # beyond n/(n+1): clipped to the largest score
    fam = Family("log", np.ones(9))
    dist = DistBatch([1.0], [1.0], [0], [fam])
    assert not dist.uncertified(0.9)[0] and dist.uncertified(0.95)[0]


def test_empty_network_is_zero_and_bad_inputs_raise():
    res, _ = aggregate(DistBatch.concat([]), [0.9])
    assert res[0.9].lower == res[0.9].upper == 0.0
    with pytest.raises(ValueError):
        aggregate(DistBatch.concat([]), [1.5])
    with pytest.raises(ValueError):
        Family("log", [np.inf])
    with pytest.raises(ValueError):
        Family("sym", [1.0])
    with pytest.raises(ValueError, match="positive"):
        Family("mult", [0.0, 1.0])
    with pytest.raises(ValueError):
        DistBatch([1.0], [1.0], [1], [Family("log", [1.0])])


def test_concat_and_take_keep_families_aligned():
    f1, f2 = Family("log", [1.0]), Family("mult", [2.0])
    a = DistBatch([1.0, 2.0], [1.0, 0.5], [0, 0], [f1])
    b = DistBatch([3.0], [1.5], [0], [f2])
    c = DistBatch.concat([a, b]).take([2, 0, 1])
    lo, hi = layer_intervals(c, 0.5)
    np.testing.assert_allclose(lo, [3.0, 1 / 2.0, 2.0 / 1.5])
    np.testing.assert_allclose(hi, [3.0, 2.0, 2.0 * 1.5])


def test_unknown_coupling_is_refused():
    dist = _batch(16, Family("log", np.abs(np.random.default_rng(2).standard_normal(99))))
    with pytest.raises(ValueError, match="coupling"):
        aggregate(dist, [0.9], coupling="sometimes")


def test_type_coupling_is_comonotone_within_a_type_and_independent_across_types():
    from estimator.aggregate import SampleBank

    fam_a = Family("log", np.abs(np.random.default_rng(3).standard_normal(199)), name="conv2d:CM_LV")
    fam_b = Family("log", np.abs(np.random.default_rng(4).standard_normal(199)), name="dwconv2d:CM_LV")
    one_type = _batch(16, fam_a, center=10.0, scale=0.3)
    typ, samples = aggregate(one_type, [0.8], coupling="type", return_samples=True, n_samples=20_000)
    lo, hi = layer_intervals(one_type, 0.8)
    # one type: every layer at the same quantile, i.e. the sum of the layer intervals
    assert typ[0.8].lower == pytest.approx(lo.sum(), rel=0.02)
    assert typ[0.8].upper == pytest.approx(hi.sum(), rel=0.02)
    assert samples is not None and samples.shape == (20_000,)
    # two types of 8 layers each: narrower than the sum of the layer intervals, wider than independent
    two = DistBatch.concat([_batch(8, fam_a, scale=0.05), _batch(8, fam_b, scale=0.05)])
    w = {c: aggregate(two, [0.9], coupling=c)[0][0.9].width for c in ("independent", "type")}
    lo2, hi2 = layer_intervals(two, 0.9)
    summed = float(hi2.sum() - lo2.sum())
    assert w["independent"] < w["type"] < summed
    assert w["type"] == pytest.approx(summed / math.sqrt(2), rel=0.15)  # two independent blocks
    # the service's sample bank gives the same numbers
    bank = SampleBank()
    a, _ = aggregate(two, [0.9], coupling="type", bank=bank)
    b, _ = aggregate(two, [0.9], coupling="type")
    assert a[0.9].lower == pytest.approx(b[0.9].lower, rel=1e-12) and a[0.9].upper == pytest.approx(b[0.9].upper,
                                                                                                    rel=1e-12)


@pytest.mark.parametrize("n", [1, 7, 1023, 1024, 4097, 10_000])
def test_tail_quantiles_are_numpys_inverted_cdf(n):
    """The network intervals' quantiles (tail selection) are np.quantile's, value for value:
    continuous, heavily tied, sorted and reversed samples, levels at and near the ends."""
    from estimator.aggregate import _quantiles

    rng = np.random.default_rng(n)
    levels = [0.0, 1e-9, 0.005, 0.05, 0.05000000000000002, 0.25, 0.5, 0.9, 0.95, 0.975, 1 - 1e-9, 1.0]
    samples = [rng.standard_normal(n), rng.integers(0, 4, n).astype(float), np.sort(rng.standard_normal(n)),
               np.sort(rng.standard_normal(n))[::-1].copy(), np.exp(3 * rng.standard_normal(n))]
    for a in samples:
        before = a.copy()
        assert _quantiles(a, levels) == [float(x) for x in np.quantile(a, levels, method="inverted_cdf")]
        assert np.array_equal(a, before)  # the samples are left as they were
    a = rng.standard_normal(n)
    a[n // 2] = np.nan
    assert np.isnan(_quantiles(a, [0.5, 0.95])).all()  # NaN goes to numpy, which answers NaN
