"""``bench adapt --device BASE --name NEW``: make a profile hold on this machine, in one command.

It times whole networks here, checks whether BASE carries (calibrated on them, it predicts
held-out families within :data:`bench.adapt.CARRY_ERROR` and its families agree, with BASE's
runner, precision and threads), and either calibrates BASE or measures a layer profile of this
machine within the budget (``--minutes``, default 10) and calibrates that
(:mod:`bench.adapt`). It prints the route and why, BASE's figures here and NEW's, with progress
bars. Every round and row is committed as it is taken (``--db``, default
``bench-data/NEW.sqlite``); run the same command again to resume a killed run: the budget
counts across runs. Bad input (an unknown BASE, a runner that cannot run here, a name in use)
stops it with one line before anything is measured or written.
"""
from __future__ import annotations

import argparse
import sys

from estimator.cliutil import integer, number

from .adapt import DEFAULT_NETWORKS, DEFAULT_RUNS, DEFAULT_WARMUP
from .calibrate import DEFAULT_SPACES
from .cmd_calibrate import base_and_root, source_specs
from .cmd_run import DEFAULT_OUT, add_runner_options, db_path, given_runner_options
from .runners.base import RUNNERS

__all__ = ["register"]



def register(sub: argparse._SubParsersAction) -> None:
    from .adapt import CARRY_ERROR, DEFAULT_MINUTES, DEFAULT_ROUNDS, DEFAULT_SAMPLES, ROUTES  # noqa: PLC0415

    p = sub.add_parser(
        "adapt", help="make a profile hold on this machine: calibrate it, or measure a small own profile",
        description="Time whole networks here and check whether BASE carries (calibrated on them, it predicts "
                    f"held-out network families within {CARRY_ERROR:.0%} and they agree, with BASE's runner, "
                    "precision and threads). If it does, calibrate BASE; if not, measure a layer profile of this "
                    "machine within the budget and calibrate that. Writes profile NEW; resumable.")
    p.add_argument("--device", required=True, help="the base profile (name or directory)")
    p.add_argument("--name", required=True, help="name of the profile to write")
    p.add_argument("--minutes", type=number(above=0), default=DEFAULT_MINUTES,
                   help=f"budget of the whole command, wall time across resumed runs: the layer profile is fitted to "
                        f"it; the network rounds are not cut short (default {DEFAULT_MINUTES:g})")
    p.add_argument("--route", default="auto", choices=ROUTES,
                   help="auto (default): the evidence decides; calibrate: calibrate BASE; profile: measure an own "
                        "layer profile")
    p.add_argument("--root", default=None, metavar="DIR",
                   help="profiles directory to read BASE from and write NEW to (default: $CL_PROFILES or profiles/)")
    p.add_argument("--replace", action="store_true", help="replace profile NEW if it exists")
    p.add_argument("--db", default=None, metavar="FILE",
                   help=f"benchmark database (default {DEFAULT_OUT}/<name>.sqlite; the state is kept beside it in "
                        "<db>.adapt.json); running again resumes from it")
    p.add_argument("--runner", default=None, choices=sorted(RUNNERS), help="target runner (default: BASE's)")
    n = p.add_argument_group(f"networks (default: --space {DEFAULT_SPACES} --networks {DEFAULT_NETWORKS})")
    n.add_argument("--space", default=None, metavar="NAME[,NAME]", help="sample architectures of these nas spaces")
    n.add_argument("--space-option", action="append", default=[], metavar="[SPACE:]KEY=VALUE",
                   help="an option of the search space(s), as for nas search (repeatable)")
    n.add_argument("--networks", type=integer(min=1), default=None, metavar="N",
                   help=f"space samples in all (default {DEFAULT_NETWORKS})")
    n.add_argument("--zoo", default=None, metavar="NAME[@RES],...|all", help="estimator.zoo networks")
    n.add_argument("--onnx", action="append", default=None, metavar="PATH", help="ONNX files or directories")
    n.add_argument("--seed", type=integer(min=0), default=0, help="sampling seed (default 0)")
    n.add_argument("--rounds", type=integer(min=2), default=DEFAULT_ROUNDS,
                   help=f"interleaved rounds over the networks, half before the layers, half after (default "
                        f"{DEFAULT_ROUNDS})")
    n.add_argument("--runs", type=integer(min=1), default=DEFAULT_RUNS,
                   help=f"timed runs per network and round (default {DEFAULT_RUNS})")
    n.add_argument("--warmup", type=integer(min=0), default=DEFAULT_WARMUP,
                   help=f"untimed runs per network and round (default {DEFAULT_WARMUP})")
    g = p.add_argument_group("own layer profile (route profile)")
    g.add_argument("--layers", default=None, help="comma-separated layer types (default: all benchable types)")
    g.add_argument("--samples", type=integer(min=1), default=DEFAULT_SAMPLES,
                   help=f"configurations per type in the plan the budget cuts, from the broad space and as many "
                        f"from the network prior (default {DEFAULT_SAMPLES})")
    g.add_argument("--max-ops", type=number(above=0), default=None, help="cap on ops per layer (default: per runner)")
    g.add_argument("--training", default=None, metavar="JSON",
                   help="training options of the own profile (as bench profile --training)")
    add_runner_options(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_adapt)


def cmd_adapt(a: argparse.Namespace) -> int:
    from .adapt import adapt, describe_adapted, sampling_plan  # noqa: PLC0415
    from .calibrate import runner_defaults  # noqa: PLC0415
    from .cmd_profile import load_json_option  # noqa: PLC0415

    base, root = base_and_root(a)
    training = load_json_option(a.training, "training")
    runner_name = a.runner or base.runner
    options = {**runner_defaults(runner_name, base), **given_runner_options(a)}
    specs = source_specs(a, default_spaces=DEFAULT_SPACES, default_networks=DEFAULT_NETWORKS)
    progress = not a.no_progress and sys.stderr.isatty()
    r = adapt(base, a.name, root, runner_name=runner_name, options=options, precision=a.precision, specs=specs,
              db=a.db or db_path(DEFAULT_OUT, a.name), minutes=a.minutes, route=a.route, rounds=a.rounds,
              runs=a.runs, warmup=a.warmup, layer_plan=sampling_plan(a.layers, a.samples, a.max_ops, a.seed),
              training=training, replace=a.replace, progress=progress,
              log=lambda text: print(f"bench: {text}", file=sys.stderr))
    for line in describe_adapted(base, r):
        print(line, file=sys.stderr if line.startswith("warning:") else sys.stdout)
    print(f"next: estimator predict MODEL.onnx --device {a.name}" + (f" --profiles {a.root}" if a.root else "")
          + f"; later, bench check --device {a.name} says whether this machine has drifted beyond its band")
    return 0
