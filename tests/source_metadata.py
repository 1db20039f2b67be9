"""Subprocesses that find the network sources through entry points, as an installed
confident-latency does, while they run this source checkout's code: its installed package
metadata may be older than pyproject.toml (an editable install made before an entry point
was added), so a distribution's metadata holding pyproject's entry points is put on
PYTHONPATH."""
from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Mapping

REPO = Path(__file__).resolve().parents[1]
GROUP = "confident_latency.network_sources"


def with_entry_points(env: Mapping[str, str], root: Path) -> dict[str, str]:
    """``env`` with PYTHONPATH leading, first, to ``root``/site holding the metadata of a
    distribution whose entry points are pyproject.toml's ``confident_latency.network_sources``
    group (the providers they name are objects, each loaded once, so an installed copy of the
    same entry points adds nothing)."""
    with (REPO / "pyproject.toml").open("rb") as fh:
        group = tomllib.load(fh)["project"]["entry-points"][GROUP]
    info = root / "site" / "confident_latency_source_checkout-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: confident-latency-source-checkout\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n" + "".join(f"{k} = {v}\n" for k, v in group.items()))
    path = [str(root / "site"), str(REPO), env.get("PYTHONPATH", "")]
    return dict(env, PYTHONPATH=os.pathsep.join(p for p in path if p))
