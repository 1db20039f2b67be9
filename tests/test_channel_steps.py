"""tests/perf/channel_steps.py's step classification and monotone constructions, on made-up
rounds (no timing)."""
from __future__ import annotations

import numpy as np

from tests.perf.channel_steps import Series, isotonic, running_min_from_top, shape_error


def _series(levels: dict[int, float], noise: float, rounds: int = 20, seed: int = 0) -> Series:
    """Per-round times: each round scales every level by a common drift, plus per-model noise."""
    rng = np.random.default_rng(seed)
    drift = 1.0 + 0.05 * rng.standard_normal(rounds)
    return Series({c: [float(v * d * (1.0 + noise * rng.standard_normal())) for d in drift]
                   for c, v in levels.items()})


def test_a_staircase_is_real_where_it_steps_and_noise_on_its_treads():
    levels = {c: (1.0 if c <= 48 else 1.33) for c in range(44, 53)}
    s = _series(levels, noise=0.01)
    floor = s.floor()[1]
    assert 0 < floor < 0.05
    assert s.classify(49, floor) == "decrease"
    assert {s.classify(c, floor) for c in (45, 46, 47, 48, 50, 51, 52)} == {"noise"}


def test_a_fast_multiple_of_four_is_a_real_inversion():
    levels = {c: (0.2 if c % 4 == 0 else 1.1) for c in range(128, 137)}
    s = _series(levels, noise=0.02)
    floor = s.floor()[1]
    assert s.classify(132, floor) == "inversion"  # 132 -> 131: slower with fewer channels
    assert s.classify(133, floor) == "decrease"
    assert s.classify(131, floor) == "noise"


def test_a_step_the_halves_disagree_on_is_noise():
    s = Series({1: [1.0, 1.0, 1.0, 1.0], 2: [0.5, 1.5, 0.5, 1.5]})
    assert s.step(2) == (0.0, 0.5, -0.5)
    assert s.classify(2, 0.0) == "noise"


def test_monotone_constructions():
    xs = [1.1, 0.2, 1.1, 1.2, 0.25]
    assert running_min_from_top(xs) == [0.2, 0.2, 0.25, 0.25, 0.25]
    iso = isotonic(range(5), xs)
    assert all(a <= b + 1e-12 for a, b in zip(iso, iso[1:]))
    assert abs(sum(iso) - sum(xs)) < 1e-9  # least squares keeps the mean
    assert shape_error([2.0, 4.0], [1.0, 2.0]) == 0.0  # scale-free
