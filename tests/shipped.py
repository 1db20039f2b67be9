"""Quick models of a shipped profile for tests: its own measured rows, a few hundred per
type, with small forests, so that training takes seconds."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from estimator.models import DeviceModels, TrainingOptions, train_models
from estimator.profile import Profile, load_profile

REPO = Path(__file__).resolve().parents[1]
#: small forests and a one-cell grid
SMALL = TrainingOptions(n_estimators=30, grid_estimators=20, grid_max_features=(0.6,), grid_min_samples_leaf=(1,))


def small_models(name: str, per_type: int) -> tuple[Profile, DeviceModels]:
    """The shipped profile ``name`` and models trained on up to ``per_type`` of its rows per
    type (a seeded draw)."""
    prof = load_profile(name, root=REPO / "profiles")
    by: dict[str, list] = {}
    for r in prof.rows():
        by.setdefault(r["layer_type"], []).append(r)
    rng = np.random.default_rng(0)
    rows = [rs[i] for t, rs in sorted(by.items()) for i in rng.choice(len(rs), min(len(rs), per_type), replace=False)]
    return prof, train_models(rows, profile_name=prof.name, precision=prof.precision, options=SMALL)
