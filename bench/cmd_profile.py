"""``bench profile DB --name NAME --source TEXT``: register a device profile from a benchmark database.

Takes the rows of one environment of a ``bench run`` database (``--env-id`` when it holds
several), writes them as ``<root>/<NAME>/measurements.csv`` and the metadata as
``<root>/<NAME>/profile.json`` (:func:`estimator.profile.create_profile`), with provenance
from the environment record (runner, versions, host, date; kind ``measured``, or
``estimated`` for a cost model such as Vela) and ``--source`` as the human-readable text
of where the numbers came from.

Cold rows (``--cold-from ENV:fc,conv2d``): the weight-bound rows (weights outweigh input and
output, :func:`estimator.layers.weight_bound`) of these types from another environment of the
same database, one that differs only in a cache flush (``bench run --layers fc,conv2d
--flush-cache 64``), join the warm rows with the feature ``cold=1``. Such a layer reads its
weights once per inference, from DRAM when the network (weights and maps) does not fit in the
last-level cache; the estimator then predicts it from the cold rows
(:meth:`estimator.predict.Estimator.cold_network_bytes`). ``profile.json`` records them
(``cold_rows``).

Device-specific mapping rules go into ``profile.json``:

* ``fusion``: which activations the target's compiler folds into the producing layer
  (``--fusion FILE.json``, :class:`estimator.fusion.FusionRules` format);
* ``op_mapping``: operators the target leaves on the CPU (``--op-mapping FILE.json``);
  ``cpu_fallback_ops`` (ONNX op types) are flagged ``cpu_fallback_op`` in every estimate;
* ``training``: :class:`estimator.models.TrainingOptions` overrides (``--training
  FILE.json``), e.g. the device's measured ``padding_split_by_type``
  (``tests/perf/padding_split.py --lum-types``).

For a database measured with the ``onnxruntime`` runner, ``fusion`` defaults to ONNX
Runtime's CPU graph optimisations (:func:`bench.profile_db.onnxruntime_fusion`) and ``op_mapping`` to the ops
it runs as views (:func:`bench.profile_db.onnxruntime_op_mapping`). For the ``vela`` runner
both default to Vela's own behaviour (:func:`bench.profile_db.vela_fusion`, :func:`~bench.profile_db.vela_op_mapping`), derived from the installed Vela's
supported-operator list plus the configurations the benchmark could not place on the
NPU (the database's ``failures``), so an Ethos-U profile says which operators fall back.

Example (the i.MX93 profile shipped in ``profiles/imx93``)::

    bench run --device imx93 --runner vela --warmup 0 --runs 1 --layers conv2d --samples 200
    bench profile bench-data/imx93.sqlite --name imx93 --hardware "NXP i.MX93 ..." \\
        --source "estimated by Vela 5.2.0, ethos-u65-256, ..."
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from estimator.errors import UserError

from .profile_db import profile_from_db

__all__ = ["register", "cmd_profile", "parse_cold_from", "load_json_option"]


# ------------------------------------------------------------------------------ command


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile", help="create a device profile (profiles/NAME/) from a benchmark database",
        description="Write profiles/NAME/measurements.csv and profile.json from one environment of a bench "
                    "database, with provenance from the environment record and --source as its text.")
    p.add_argument("db", help="benchmark database (bench run --out)")
    p.add_argument("--name", required=True, help="profile (device) name: the directory under --root")
    p.add_argument("--source", required=True, help="where the numbers came from (free text, kept in provenance)")
    p.add_argument("--root", default=None, help="profiles directory (default: $CL_PROFILES or the repository's profiles/)")
    p.add_argument("--env-id", type=int, default=None, help="environment to take (needed when the database holds several)")
    p.add_argument("--cold-from", default=None, metavar="ENV:TYPE[,TYPE]",
                   help="add the weight-bound fc/conv2d rows of environment ENV, measured with --flush-cache and "
                        "otherwise like the profile's, as cold rows (feature cold=1: what networks too big for the "
                        "last-level cache run), e.g. 2:fc,conv2d")
    p.add_argument("--hardware", default=None, help="hardware description (default: the environment's device name)")
    p.add_argument("--description", default=None, help="free-text description")
    p.add_argument("--fusion", default=None, metavar="JSON", help="fusion rules file (default: the runner's, if known)")
    p.add_argument("--op-mapping", default=None, metavar="JSON", help="op_mapping file (default: the runner's, if known)")
    p.add_argument("--training", default=None, metavar="JSON",
                   help="training options file (estimator.models.TrainingOptions overrides, e.g. "
                        "padding_split_by_type)")
    p.add_argument("--force", action="store_true", help="replace an existing profile of that name")
    p.set_defaults(func=cmd_profile)


def load_json_option(path: str | None, what: str) -> Any:
    if path is None:
        return None
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise UserError(f"--{what}: cannot read {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise UserError(f"--{what}: {path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None


def parse_cold_from(spec: str | None) -> tuple[int, list[str]] | None:
    """``"2:fc,conv2d"`` -> ``(2, ["fc", "conv2d"])``; only :data:`~estimator.layers.COLD_TYPES`."""
    from estimator.layers import COLD_TYPES  # noqa: PLC0415

    if spec is None:
        return None
    env_s, _, types_s = spec.partition(":")
    types = list(dict.fromkeys(t.strip() for t in types_s.split(",") if t.strip()))
    if not env_s.strip().isdigit() or not types:
        raise UserError(f"--cold-from {spec!r}: use ENV:TYPE[,TYPE], e.g. 2:fc,conv2d")
    bad = [t for t in types if t not in COLD_TYPES]
    if bad:
        raise UserError(f"--cold-from: {', '.join(bad)} has no cold feature; only {', '.join(COLD_TYPES)} (layers "
                        f"whose weights can outweigh their activations)")
    return int(env_s), types


def cmd_profile(a: argparse.Namespace) -> int:
    prof = profile_from_db(a.db, a.name, source=a.source, root=a.root, env_id=a.env_id,
                           cold_from=parse_cold_from(a.cold_from), hardware=a.hardware,
                           description=a.description, fusion=load_json_option(a.fusion, "fusion"),
                           op_mapping=load_json_option(a.op_mapping, "op-mapping"),
                           training=load_json_option(a.training, "training"), force=a.force)
    from estimator.dataset import excluded_message  # noqa: PLC0415

    excluded: list[tuple[int, str]] = []
    n = sum(1 for _ in prof.rows(excluded))
    print(f"wrote profile {prof.name} to {prof.path} ({n} rows, provenance {prof.provenance.kind}, runner {prof.runner})")
    if excluded:
        print(f"warning: {excluded_message(prof.measurements_path, excluded)}")
    print(f"source: {prof.provenance.source}")
    for t, e in sorted((prof.extra.get("cold_rows") or {}).items()):
        print(f"{t}: {e['rows']} weight-bound rows measured cold (flush_cache_mb {e['flush_cache_mb']}, environment "
              f"{e['env_id']}) beside the warm ones, feature cold=1")
    cpu = prof.cpu_fallback_ops
    if cpu:
        print(f"cpu_fallback_ops: {', '.join(cpu)}")
    print(f"next: estimator train --device {prof.name}" + (f" --profiles {a.root}" if a.root else ""))
    return 0
