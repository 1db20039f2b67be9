"""``bench calibrate`` and ``bench networks``: whole networks measured on the target.

``bench calibrate --device BASE --name NEW`` measures whole networks on the target
(:mod:`bench.network_measure`; by default samples of the built-in NAS search spaces) and
writes profile NEW: BASE's layer rows unchanged, plus the network rows (``networks.csv``
and the networks themselves, weightless) and where they were measured (``calibration`` in
``profile.json``: runner, options, host and runtime fingerprint, date). Estimates on NEW are
then calibrated on those networks (:mod:`estimator.calibration`). It prints how far BASE is
off on this target ("BASE predicts 31 % high here") and what the calibration found.

``bench networks --device NAME --out DIR`` measures the same way and writes only the network
set (``DIR/networks.csv`` + ``DIR/networks/``): held-out networks for ``estimator evaluate
--device NAME --networks DIR``.

Both record every round of every network in a benchmark database as it is taken
(``--db``, default ``bench-data/<name>.sqlite``) and resume from it when run again with the
same arguments. Bad input (an unknown space or zoo network, an ONNX file the estimator cannot
read, an empty directory, a network the runner cannot run) stops the command with one line
before anything is written; a profile is written whole, or not at all.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from estimator.cliutil import integer
from estimator.errors import UserError

from .calibrate import DEFAULT_NETWORKS, DEFAULT_SPACES
from .cmd_run import DEFAULT_OUT, add_runner_options, db_path, given_runner_options
from .measure import make_runner
from .network_measure import DEFAULT_ROUNDS, DEFAULT_RUNS, DEFAULT_WARMUP
from .runners.base import RUNNERS

__all__ = ["register", "add_measurement_args", "base_and_root", "source_specs", "DEFAULT_NETWORKS", "DEFAULT_SPACES"]



def _sources_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(f"networks (default: --space {DEFAULT_SPACES} --networks {DEFAULT_NETWORKS})")
    g.add_argument("--space", default=None, metavar="NAME[,NAME]",
                   help="sample architectures of these nas search spaces (built-in names or module:function)")
    g.add_argument("--space-option", action="append", default=[], metavar="[SPACE:]KEY=VALUE",
                   help="an option of the search space(s), as for nas search (repeatable)")
    g.add_argument("--networks", type=integer(min=1), default=None, metavar="N",
                   help=f"space samples in all, round robin over the spaces (default {DEFAULT_NETWORKS})")
    g.add_argument("--zoo", default=None, metavar="NAME[@RES],...|all", help="estimator.zoo networks")
    g.add_argument("--onnx", action="append", default=None, metavar="PATH",
                   help="ONNX files or directories of them (repeatable)")
    g.add_argument("--seed", type=integer(min=0), default=0, help="sampling seed of the space samples (default 0)")
    m = add_measurement_args(p)
    m.add_argument("--db", default=None, metavar="FILE",
                   help=f"benchmark database the rounds are committed to (default {DEFAULT_OUT}/<name>.sqlite); "
                        "running again resumes from it")
    p.add_argument("--runner", default=None, choices=sorted(RUNNERS),
                   help="target runner (calibrate: default the base profile's runner; networks: onnxruntime)")
    add_runner_options(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def add_measurement_args(p: argparse.ArgumentParser) -> Any:
    """``--rounds/--runs/--warmup`` of whole-network timing (bench calibrate, networks, check);
    returns the argument group."""
    m = p.add_argument_group("measurement")
    m.add_argument("--rounds", type=integer(min=1), default=DEFAULT_ROUNDS,
                   help="interleaved rounds over all networks; a network's latency is the median of its rounds' "
                        f"medians (default {DEFAULT_ROUNDS}; a cost model is asked once)")
    m.add_argument("--runs", type=integer(min=1), default=DEFAULT_RUNS,
                   help=f"timed runs per network and round (default {DEFAULT_RUNS})")
    m.add_argument("--warmup", type=integer(min=0), default=DEFAULT_WARMUP,
                   help=f"untimed runs per network and round (default {DEFAULT_WARMUP})")
    return m


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser(
        "calibrate", help="measure whole networks on the target and write a calibrated profile",
        description="Measure whole networks on the target and write profile NEW: the base profile's layer rows "
                    "plus the network rows, on which its estimates are calibrated (estimator.calibration).")
    c.add_argument("--device", required=True, help="the base profile (name or directory)")
    c.add_argument("--name", required=True, help="name of the profile to write")
    c.add_argument("--root", default=None, metavar="DIR",
                   help="profiles directory to read BASE from and write NEW to (default: $CL_PROFILES or profiles/)")
    c.add_argument("--replace", action="store_true", help="replace profile NEW if it exists")
    _sources_args(c)
    c.set_defaults(func=cmd_calibrate)

    n = sub.add_parser(
        "networks", help="measure whole networks on the target and write them as a network set",
        description="Measure whole networks on the target and write DIR/networks.csv and DIR/networks/ "
                    "(e.g. held-out networks for `estimator evaluate --networks DIR`).")
    n.add_argument("--device", required=True,
                   help="device name (names the database; the fusion rules of its profile, if installed, import the "
                        "networks)")
    n.add_argument("--out", required=True, metavar="DIR", help="directory to write the network set to")
    n.add_argument("--root", default=None, metavar="DIR", help="profiles directory (default: $CL_PROFILES or profiles/)")
    _sources_args(n)
    n.set_defaults(func=cmd_networks)


# ------------------------------------------------------------------------- helpers


def _space_options(items: list[str], spaces: list[str]) -> dict[str, dict[str, Any]]:
    from estimator.cliutil import parse_option  # noqa: PLC0415

    out: dict[str, dict[str, Any]] = {s: {} for s in spaces}
    for it in items:
        target, sep, rest = it.partition(":")
        if sep and "=" not in target and target in spaces:
            k, v = parse_option(rest, "--space-option")
            out[target][k] = v
        else:
            k, v = parse_option(it, "--space-option")
            for s in spaces:
                out[s][k] = v
    return out


def source_specs(a: argparse.Namespace, *, default_spaces: str | None, default_networks: int) -> list[Any]:
    """The networks named by ``--space/--space-option/--networks/--seed``, ``--zoo`` and
    ``--onnx`` (:mod:`bench.network_sources`); ``default_spaces`` when none is given, or a
    one-line error where there is no default (``bench refine``)."""
    from .network_sources import onnx_specs, parse_zoo, space_specs, zoo_specs  # noqa: PLC0415

    spaces = [s.strip() for s in (a.space or "").split(",") if s.strip()]
    if not spaces and not a.zoo and not a.onnx:
        if not default_spaces:
            raise UserError("give the target networks: --onnx PATH, --zoo NAME or --space NAME")
        spaces = default_spaces.split(",")
    if a.networks is not None and not spaces:
        raise UserError("--networks counts space samples: give --space too")
    if a.space_option and not spaces:
        raise UserError("--space-option goes with --space")
    specs = []
    if spaces:
        specs += space_specs(spaces, a.networks if a.networks is not None else default_networks, seed=a.seed,
                             options=_space_options(a.space_option, spaces))
    if a.zoo:
        specs += zoo_specs(parse_zoo(a.zoo))
    if a.onnx:
        specs += onnx_specs(a.onnx)
    return specs


def _specs(a: argparse.Namespace) -> list[Any]:
    return source_specs(a, default_spaces=DEFAULT_SPACES, default_networks=DEFAULT_NETWORKS)


# ------------------------------------------------------------------------ networks


def _measure(a: argparse.Namespace, name: str, runner_name: str, fusion: Any, base: Any) -> Any:
    """Sources -> specs (validated), runner -> :class:`bench.calibrate.Measured`."""
    from .calibrate import measure, precision_for, runner_defaults  # noqa: PLC0415

    specs = _specs(a)
    if not specs:
        raise UserError("no network to measure")
    given = {**runner_defaults(runner_name, base), **given_runner_options(a)}
    runner = make_runner(runner_name, given)
    return measure(name, runner, specs, fusion=fusion, db=a.db or db_path(DEFAULT_OUT, name), rounds=a.rounds,
                   runs=a.runs, warmup=a.warmup, options=given,
                   precision=a.precision or precision_for(runner_name, runner.model_format, base),
                   progress=not a.no_progress and sys.stderr.isatty(),
                   log=lambda text: print(f"bench: {text}", file=sys.stderr))


def _fusion_of(device: str, root: str | None) -> tuple[Any, Any]:
    from estimator.errors import NotFoundError  # noqa: PLC0415
    from estimator.profile import load_profile  # noqa: PLC0415

    try:
        prof = load_profile(device, root)
    except NotFoundError:
        return None, None
    return prof, prof.fusion_rules()


def _check_name(name: str, flag: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise UserError(f"{flag} {name!r}: use letters, digits, '.', '_' and '-' only")


# ------------------------------------------------------------------------ commands


def cmd_networks(a: argparse.Namespace) -> int:
    from .calibrate import target_description  # noqa: PLC0415
    from .network_measure import write_network_set  # noqa: PLC0415

    _check_name(a.device, "--device")
    out = Path(a.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out}: exists and is not an empty directory")
    base, fusion = _fusion_of(a.device, a.root)
    m = _measure(a, a.device, a.runner or "onnxruntime", fusion, base)
    tmp = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        write_network_set(tmp, m.results, runner=m.runner, kind=m.kind)
        (tmp / "environment.json").write_text(json.dumps(
            {"device": a.device, "runner": m.runner, "kind": m.kind, "runner_options": m.options,
             "precision": m.precision, "rounds": m.rounds, "runs": m.runs, "warmup": m.warmup,
             "environment": m.environment}, indent=2, sort_keys=True, default=str) + "\n")
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    what = "estimated" if m.kind == "estimated" else "measured"
    print(f"{what} {len(m.results)} networks in {m.seconds:.0f} s on {target_description(m)}; "
          f"wrote {out / 'networks.csv'}")
    print(f"next: estimator evaluate --device {a.device} --networks {out}")
    return 0


def base_and_root(a: argparse.Namespace) -> tuple[Any, Path]:
    """``--device/--name/--root/--replace`` of a command that writes profile NEW from BASE:
    BASE loaded and the root NEW goes to, or one line when NEW's name is bad or in use."""
    from estimator.profile import default_root, load_profile  # noqa: PLC0415

    _check_name(a.name, "--name")
    base = load_profile(a.device, a.root)
    root = Path(a.root) if a.root else default_root()
    if (root / a.name).exists() and not a.replace:
        raise UserError(f"profile {a.name!r} exists in {root}; give --replace to overwrite it, or another --name")
    return base, root


def cmd_calibrate(a: argparse.Namespace) -> int:
    from estimator import fingerprint as fp  # noqa: PLC0415

    from .adapt import does_not_carry  # noqa: PLC0415
    from .calibrate import bias, describe_sources, target_description, write_calibrated_profile  # noqa: PLC0415

    base, root = base_and_root(a)
    m = _measure(a, a.name, a.runner or base.runner, base.fusion_rules(), base)
    med, lo, hi, n = bias(base, m.results)
    out = write_calibrated_profile(base, a.name, root, m, replace=a.replace)
    what = "estimated" if m.kind == "estimated" else "measured"
    print(f"{what} {len(m.results)} networks ({describe_sources(m.results)}) in {m.seconds:.0f} s on "
          f"{target_description(m)}")
    off = (1 / med - 1) * 100 if med < 1 else (med - 1) * 100
    print(f"{base.name} predicts {off:.0f} % {'high' if med < 1 else 'low'} here: median measured/predicted "
          f"{med:.3f} (range {lo:.3f}-{hi:.3f}) over {n} networks")
    diffs = fp.differences(base.recorded_fingerprint(), fp.fingerprint(base.runner, base.threads), base.runner) \
        if m.kind == "measured" and m.runner == base.runner else []
    if diffs:
        print(f"what differs from where {base.name} was measured: {'; '.join(diffs)}")
    if out.report is not None:
        r = out.report
        cv = r["cv_mean_abs_error_pct"]
        alt = ", ".join(f"{k} {e:.1f} %" for k, e in cv.items())
        print(f"calibrated on {r['n_networks']} networks: {r['method']} ({r['correction']['formula']}); "
              f"{r['validation']} mean |error| {cv[r['method']]:.1f} % against "
              f"{r['uncalibrated_mean_abs_error_pct']:.1f} % uncalibrated (candidates: {alt})")
        print(f"why: {r['choice']}")
        if r.get("warning"):
            print(f"warning: {r['warning']}", file=sys.stderr)
        why = does_not_carry(base, r, m)
        if why:
            print(f"warning: {why}: this calibration does not make {base.name} hold here; `bench adapt --device "
                  f"{base.name} --name NEW` measures a small profile of this machine instead (at most 10 minutes)",
                  file=sys.stderr)
    else:
        print(f"warning: {a.name} is not calibrated: {out.info.get('reason')}", file=sys.stderr)
    print(f"wrote profile {a.name} ({out.path}): {base.name}'s layer rows + {len(m.results)} network rows")
    print(f"next: estimator predict MODEL.onnx --device {a.name}" + (f" --profiles {root}" if a.root else ""))
    return 0
