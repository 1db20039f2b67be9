"""``bench refine``: measure the layer configurations that widen the target networks' intervals most.

``bench refine --device BASE (--onnx PATH | --zoo NAME | --space S [--networks N])`` estimates the
target networks on BASE, measures the layer configurations that add most to their CM_O and
CM_LV widths (and a few neighbours of each) with smart padding, writes profile NAME (default
``BASE-refined``: BASE's rows plus the new ones, ``refined`` in ``profile.json``), retrains
and repeats (:mod:`bench.refine`). One line per round: device minutes so far, configurations
measured, and each target's prediction with its CM_LV and CM_O widths.

Every measurement is committed to the refine database as it is taken (``--db``, default
``bench-data/BASE-refine.sqlite``), and so is each round's plan; running the same command again
resumes from it: the round a killed run was in goes on, ``--rounds`` and ``--minutes`` count the
rounds and device time already spent, and the profile is rebuilt from BASE and the database, so
a killed run loses nothing it measured.
``--exclude-onnx`` keeps every configuration of those (held-out) networks out of what is
measured, as in ``bench run --from-onnx``. Bad input (an unknown device or space, an empty
directory, an ONNX file the estimator cannot read) stops the command with one line before
anything is measured or written.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from estimator.cliutil import integer, number
from estimator.errors import UserError

from .cmd_calibrate import _check_name, source_specs
from .cmd_run import DEFAULT_OUT, add_runner_options, given_runner_options
from .measure import make_runner
from .refine import MIN_GAIN
from .runners.base import RUNNERS

__all__ = ["register"]

DEFAULT_ROUNDS = 3
DEFAULT_NETWORKS = 10
DEFAULT_TOP = 20
DEFAULT_NEIGHBOURS = 2


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "refine", help="measure the layer configurations that widen target networks' intervals most, retrain, repeat",
        description="Estimate the target networks, measure the layer configurations that add most to their CM_O and "
                    "CM_LV widths (and neighbours) with smart padding, retrain and repeat; writes profile NAME: the "
                    "base profile's rows plus the new ones.")
    p.add_argument("--device", required=True, help="the base profile (name or directory)")
    p.add_argument("--name", default=None, help="name of the profile to write (default DEVICE-refined)")
    p.add_argument("--root", default=None, metavar="DIR",
                   help="profiles directory to read DEVICE from and write NAME to (default: $CL_PROFILES or profiles/)")
    p.add_argument("--replace", action="store_true", help="replace profile NAME if it exists and is not a refinement "
                                                          "of DEVICE")
    g = p.add_argument_group("target networks (--onnx, --zoo, --space: at least one)")
    g.add_argument("--onnx", action="append", default=None, metavar="PATH",
                   help="ONNX files or directories of them (repeatable)")
    g.add_argument("--space", default=None, metavar="NAME[,NAME]",
                   help="sample architectures of these nas search spaces")
    g.add_argument("--space-option", action="append", default=[], metavar="[SPACE:]KEY=VALUE",
                   help="an option of the search space(s), as for nas search (repeatable)")
    g.add_argument("--networks", type=integer(min=1), default=None, metavar="N",
                   help=f"space samples in all (default {DEFAULT_NETWORKS})")
    g.add_argument("--zoo", default=None, metavar="NAME[@RES],...|all", help="estimator.zoo networks")
    g.add_argument("--seed", type=integer(min=0), default=0, help="sampling seed of the space samples (default 0)")
    g.add_argument("--exclude-onnx", action="append", default=None, metavar="PATH",
                   help="never measure a layer configuration these (held-out) networks use (a file or a directory; "
                        "repeatable)")
    r = p.add_argument_group("rounds")
    r.add_argument("--rounds", type=integer(min=1), default=DEFAULT_ROUNDS,
                   help=f"at most R rounds in all, those of earlier runs of the same command included "
                        f"(default {DEFAULT_ROUNDS})")
    r.add_argument("--minutes", type=number(above=0), default=None, metavar="M",
                   help="device-time budget in minutes (measuring time of every run of the same command; checked "
                        "before each measurement)")
    r.add_argument("--top", type=integer(min=1), default=DEFAULT_TOP,
                   help=f"configurations ranked highest measured per round (default {DEFAULT_TOP})")
    r.add_argument("--neighbours", type=integer(min=0), default=DEFAULT_NEIGHBOURS,
                   help=f"neighbours measured with each (bench.sampling.neighbours; default {DEFAULT_NEIGHBOURS})")
    r.add_argument("--min-gain", type=number(min=0), default=MIN_GAIN, metavar="FRACTION",
                   help=f"stop when a round shrinks the targets' mean CM_LV width (each relative to its width before "
                        f"refining) by less than this "
                        f"(default {MIN_GAIN}; 0: run every round)")
    m = p.add_argument_group("measurement")
    m.add_argument("--db", default=None, metavar="FILE",
                   help=f"benchmark database the rows are committed to (default {DEFAULT_OUT}/DEVICE-refine.sqlite); "
                        "running again resumes from it")
    m.add_argument("--warmup", type=integer(min=0), default=5, help="untimed runs before each measurement (default 5)")
    m.add_argument("--runs", type=integer(min=1), default=20, help="timed runs per measurement (default 20)")
    m.add_argument("--max-ops", type=number(above=0), default=None, help="cap on ops per layer (default: per runner)")
    m.add_argument("--max-elems", type=integer(min=1), default=None,
                   help="cap on elements of any LUM tensor (default: per runner)")
    p.add_argument("--runner", default=None, choices=sorted(RUNNERS),
                   help="target runner (default: the base profile's)")
    add_runner_options(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_refine)


def _fmt(w: Any) -> str:
    return (f"{w.name} {w.total_ms:.4g} ms (CM_LV {w.lv[0]:.4g}-{w.lv[1]:.4g}, width {w.lv_width:.4g}; "
            f"CM_O width {w.o_width:.4g})")


def cmd_refine(a: argparse.Namespace) -> int:
    from estimator.profile import default_root, load_profile  # noqa: PLC0415

    from .calibrate import precision_for, runner_defaults  # noqa: PLC0415
    from .network_plan import held_out_keys, onnx_files  # noqa: PLC0415
    from .refine import load_targets, refine  # noqa: PLC0415
    from .sampling import limits_for  # noqa: PLC0415

    name = a.name or f"{Path(a.device).name}-refined"
    _check_name(name, "--name")
    base = load_profile(a.device, a.root)
    if name == base.name:
        raise UserError(f"--name {name}: the refined profile cannot replace its base")
    root = Path(a.root) if a.root else default_root()
    if (root / name).exists() and not a.replace:
        try:
            own = load_profile(name, root).refined.get("base") == base.name
        except UserError:
            own = False
        if not own:
            raise UserError(f"profile {name!r} exists in {root} and is not a refinement of {base.name}; give "
                            f"--replace to overwrite it, or another --name")
    fusion = base.fusion_rules()
    targets = load_targets(source_specs(a, default_spaces=None, default_networks=DEFAULT_NETWORKS), fusion)
    excluded = [{"name": f"onnx:{f.stem}", "path": str(f.resolve())} for f in onnx_files(a.exclude_onnx or (),
                                                                                        "--exclude-onnx")]
    exclude_keys = held_out_keys(a.exclude_onnx or (), fusion=fusion)
    runner_name = a.runner or base.runner
    given = {**runner_defaults(runner_name, base), **given_runner_options(a)}
    limits = limits_for(runner_name, max_ops=a.max_ops, max_elems=a.max_elems)
    runner = make_runner(runner_name, given)
    db = Path(a.db) if a.db else Path(DEFAULT_OUT) / f"{base.name}-refine.sqlite"
    print(f"bench: refining {base.name} toward {len(targets)} network(s) on {runner_name} -> {db}; profile {name}",
          file=sys.stderr)

    def report(r: Any) -> None:
        head = ("round 0 (before measuring, rows already in the database included)" if r.round == 0 else
                f"round {r.round}: {r.device_seconds / 60:.2f} device min ({r.device_seconds:.1f} s), "
                f"{r.measured} configurations measured"
                + (f" ({r.failed} failed)" if r.failed else ""))
        print(f"{head}; " + "; ".join(_fmt(w) for w in r.widths), flush=True)

    out = refine(base, name, root, targets, runner, db=db, limits=limits, rounds=a.rounds, minutes=a.minutes,
                 top=a.top, neighbours=a.neighbours, exclude_keys=exclude_keys, excluded=excluded, warmup=a.warmup,
                 runs=a.runs, precision=a.precision or precision_for(runner_name, runner.model_format, base),
                 options=given, min_gain=a.min_gain,
                 progress=not a.no_progress and sys.stderr.isatty(), report=report,
                 log=lambda text: print(f"bench: {text}", file=sys.stderr))
    print(f"stopped: {out.stopped}")
    print(f"wrote profile {name} ({out.path}): {base.name}'s layer rows + {out.added} refined rows "
          f"({len(out.rounds) - 1} round(s), {out.device_seconds / 60:.2f} device min in all, "
          f"{out.run_seconds / 60:.2f} this run); data: {db}")
    print(f"next: estimator predict MODEL.onnx --device {name}" + (f" --profiles {root}" if a.root else ""))
    return 0
