"""``bench check``: does a profile's timing hold on this machine? Seconds, not a re-profile.

``bench check --device NAME`` rebuilds a few of the profile's own network rows (the whole
networks ``bench calibrate`` measured, ``networks.csv``), times them here with the runner and
options that measured them, and prints how far this machine is from where they were measured:
the median ratio here / there over the networks, and whether each re-timed network lies inside
the profile's calibrated 90 % CM_LV band. When more lie outside than a band that holds would
leave out (:func:`max_outside`: 3 of 8), the machine has drifted beyond the band since the
calibration, and it warns beside the command that fixes it (``bench adapt``); a profile without
calibration warns when the median ratio is beyond :data:`DRIFT_WARN`.

Why a timing check beside the fingerprint warning (:mod:`estimator.fingerprint`): VMs of one
type cloned from one image agree on everything the fingerprint records (CPU model and flags,
caches, kernel, runtime, even ``/etc/machine-id``), and a VM's speed moves with what shares its
host. Measured on a VM whose fingerprint matched an earlier ``host-cpu`` profile's in full: at
one time the zoo networks ran 19.5 % slower in median than that profile predicted (up to 28 %;
resnet18 22.7 ms against 19.8 ms) and ``bench check`` said 1.14x; 80 minutes later resnet18 took
19.8 ms again and ``bench check`` said 0.96x. Nothing in the fingerprint changed.

The networks are chosen evenly over the rows' latency range (:data:`DEFAULT_NETWORKS`, 8 by
default: a few seconds on host-cpu). A row whose network cannot be rebuilt here (an ONNX file
no longer at its path) is left out and said so; a network that rebuilds to another graph
(another torch or onnx version exports it differently) is timed but left out of the ratio.
The rounds go to a temporary database: a check measures afresh every time.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from estimator.cliutil import integer
from estimator.errors import UserError

from .cmd_calibrate import add_measurement_args
from .cmd_run import add_runner_options, given_runner_options
from .measure import make_runner

__all__ = ["register", "DEFAULT_NETWORKS", "DRIFT_WARN", "pick", "max_outside"]

#: networks re-timed by default
DEFAULT_NETWORKS = 8
#: a median ratio here / there beyond 1 +- this warns (whole-network round medians move
#: 5-20 % on these shared VMs; the median over 8 networks moves less)
DRIFT_WARN = 0.10


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser(
        "check", help="re-time a few of a profile's calibration networks here: is this machine off now?",
        description="Rebuild a few of the profile's own network rows (networks.csv, written by bench calibrate), "
                    "time them here with the runner and options that measured them, and print how far this "
                    "machine is from where they were measured. The fingerprint cannot see speed: VMs of one type "
                    "share every field, and a VM's speed moves with what shares its host.")
    c.add_argument("--device", required=True, help="the profile (name or directory)")
    c.add_argument("--root", default=None, metavar="DIR", help="profiles directory (default: $CL_PROFILES or profiles/)")
    c.add_argument("--networks", type=integer(min=1), default=DEFAULT_NETWORKS, metavar="N",
                   help=f"networks to re-time, spread over the rows' latency range (default {DEFAULT_NETWORKS})")
    add_measurement_args(c)
    add_runner_options(c)
    c.add_argument("--no-progress", action="store_true", help="no progress bars")
    c.set_defaults(func=cmd_check)


def pick(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` rows spread evenly over the rows' measured latencies (all of them if fewer)."""
    ordered = sorted(rows, key=lambda r: r["measured_ms"])
    if n >= len(ordered):
        return ordered
    if n == 1:
        return [ordered[len(ordered) // 2]]
    return [ordered[round(i * (len(ordered) - 1) / (n - 1))] for i in range(n)]


def cmd_check(a: argparse.Namespace) -> int:
    from estimator import fingerprint as fp  # noqa: PLC0415
    from estimator.profile import load_profile  # noqa: PLC0415

    from .calibrate import measure, precision_for, target_description  # noqa: PLC0415
    from .network_sources import row_specs  # noqa: PLC0415

    prof = load_profile(a.device, a.root)
    rows = prof.network_rows()
    if not rows:
        raise UserError(f"profile {prof.name} has no network rows to compare with: measure some with "
                        f"`bench calibrate --device {prof.name} --name NEW`, then check NEW")
    cal = prof.calibration
    runner_name = cal["runner"]
    rows = [r for r in rows if r["runner"] == runner_name]
    if not rows:
        raise UserError(f"profile {prof.name}: none of its network rows was measured by {runner_name}, the runner its "
                        f"calibration names")
    specs, skipped = row_specs(pick(rows, a.networks))
    for name, why in skipped.items():
        print(f"bench: {name} left out: {why}", file=sys.stderr)
    if not specs:
        raise UserError(f"none of {prof.name}'s networks can be rebuilt here ({len(skipped)} left out)")
    given = {**dict(cal.get("runner_options") or {}), **given_runner_options(a)}
    runner = make_runner(runner_name, given)
    precision = a.precision or cal.get("precision") or precision_for(runner_name, runner.model_format, prof)
    with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
        m = measure(f"{prof.name}-check", runner, specs, fusion=prof.fusion_rules(), precision=precision,
                    db=Path(tmp) / "check.sqlite", rounds=a.rounds, runs=a.runs, warmup=a.warmup,
                    options=given, progress=not a.no_progress and sys.stderr.isatty(),
                    log=lambda text: print(f"bench: {text}", file=sys.stderr))
    by_name = {r["name"]: r for r in rows}
    bands = _bands(prof, m.results)
    what = "estimated" if m.kind == "estimated" else "measured"
    print(f"{prof.name}: {len(m.results)} of its {len(rows)} networks {what} again in {m.seconds:.0f} s on "
          f"{target_description(m)}")
    print(f"  {'network':<28} {'there ms':>9} {'here ms':>9} {'here/there':>10}"
          + (f"  {'90 % CM_LV band ms':>20}" if bands else ""))
    ratios, outside = [], 0
    for r in sorted(m.results, key=lambda r: by_name[r.spec.name]["measured_ms"]):
        row = by_name[r.spec.name]
        ratio = r.measured_ms / row["measured_ms"]
        same = r.spec.onnx_sha256 == row["onnx_sha256"]
        if same:
            ratios.append(ratio)
        band = ""
        if bands:
            lo, hi = bands[r.spec.name]
            inside = lo <= r.measured_ms <= hi
            outside += not inside
            band = f"  [{lo:8.3f}, {hi:8.3f}]{'' if inside else ' outside'}"
        print(f"  {r.spec.name[:28]:<28} {row['measured_ms']:>9.3f} {r.measured_ms:>9.3f} {ratio:>9.2f}x{band}"
              + ("" if same else "  (rebuilt to another graph here: left out of the ratio)"))
    if not ratios:
        raise UserError(f"every network rebuilt to another graph than {prof.name} measured (torch or onnx "
                        f"versions differ?): nothing to compare")
    med = statistics.median(ratios)
    there = statistics.median(by_name[r.spec.name]["spread_pct"] for r in m.results)
    here = statistics.median(r.spread_pct for r in m.results)
    print(f"median here/there {med:.3f} over {len(ratios)} networks (range {min(ratios):.2f}-{max(ratios):.2f}; "
          f"round-to-round spread {there:.1f} % there, {here:.1f} % here)")
    diffs = fp.differences(cal.get("fingerprint") or {}, fp.fingerprint(runner_name, given.get("threads")),
                           runner_name) if m.kind == "measured" else []
    print("what the fingerprint sees differ: " + ("; ".join(diffs) if diffs else "nothing"))
    off = (med - 1) * 100 if med > 1 else (1 / med - 1) * 100
    way = "slower" if med > 1 else "faster"
    fix = f"`bench adapt --device {prof.name} --name NEW` (at most 10 minutes) and use NEW"
    if bands:
        allowed = max_outside(len(m.results))
        print(f"{len(m.results) - outside} of {len(m.results)} re-timed networks inside {prof.name}'s calibrated 90 % "
              f"CM_LV band (more than {allowed - 1} outside would be unlikely if it held)")
        if outside >= allowed:
            print(f"warning: this machine has drifted beyond {prof.name}'s band since it was calibrated: {outside} of "
                  f"{len(m.results)} networks outside it (they run {off:.0f} % {way} than then); adapt again with "
                  f"{fix}", file=sys.stderr)
    elif abs(med - 1) > DRIFT_WARN:
        print(f"warning: {prof.name}'s networks run {off:.0f} % {way} here than where they were measured, and it is "
              f"not calibrated; its estimates are off by about as much: {fix}", file=sys.stderr)
    else:
        print(f"{prof.name}'s networks run within {DRIFT_WARN:.0%} of where they were measured")
    return 0


def max_outside(n: int, confidence: float = 0.9, alpha: float = 0.05) -> int:
    """The fewest of ``n`` networks outside a ``confidence`` band that a band which holds
    leaves out with probability below ``alpha`` (a binomial tail): 3 of 8, 2 of 3."""
    p = 1.0 - confidence
    for k in range(n + 1):
        tail = sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1))
        if tail < alpha:
            return k
    return n + 1


def _bands(prof: Any, results: list[Any]) -> dict[str, tuple[float, float]]:
    """Each network's calibrated 90 % CM_LV interval on ``prof`` ({} when the profile is not
    calibrated)."""
    from estimator.predict import Estimator  # noqa: PLC0415

    est = Estimator.from_profile(prof)
    if not est.calibration_info().get("applied"):
        return {}
    out = {}
    for r in results:
        e = est.estimate_network(r.spec.weightless_onnx, [0.9], per_layer=False)
        out[r.spec.name] = tuple(e.intervals["CM_LV"][0.9])
    return out
