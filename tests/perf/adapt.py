"""``bench adapt`` on a target, then held-out networks timed later: prints figures, asserts nothing.

1. ``bench adapt --device BASE --name NEW`` with the target's runner options, as a user runs it
   (its wall time is the budget the acceptance counts; ``--minutes``, default 10);
2. a pause: the held-out phase starts ``--wait`` minutes (default 10) after ``bench adapt`` ends,
   so the figures say whether the intervals hold at another moment, not only in the window
   they were fitted in;
3. held-out networks of families no calibration network comes from (the zoo's, timed whole in
   ``--rounds`` interleaved rounds, in a database of their own) predicted by: the shipped BASE
   as a user gets it, NEW uncalibrated (Eq. 7/8) and NEW calibrated.

Targets (issue "Your machine in one command"): ``bench adapt`` within 10 minutes; held-out mean
|error| <= 6 %; 90 % CM_LV coverage >= 90 % at mean width <= 30 %.

    taskset -c 1 python tests/perf/adapt.py --target ort-1-thread     # another CPU than BASE's
    python tests/perf/adapt.py --target ort-2-threads                 # both cores: a quiet machine
    taskset -c 1 python tests/perf/adapt.py --target litert-fp32      # needs the tflite extra
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tests.perf.calibration import HOST_HELD_OUT, _evaluate, _log, _print_eval  # noqa: E402

#: target -> runner and options (the runner options of ``bench adapt``)
TARGETS: dict[str, dict[str, Any]] = {
    "ort-1-thread": {"runner": "onnxruntime", "options": {"threads": 1}, "pin": True},
    "ort-2-threads": {"runner": "onnxruntime", "options": {"threads": 2}, "pin": False},
    "litert-fp32": {"runner": "litert", "options": {"threads": 1, "precision": "fp32"}, "pin": False},  # taskset
}


def _flags(options: dict[str, Any]) -> list[str]:
    return [x for k, v in sorted(options.items()) for x in (f"--{k.replace('_', '-')}", str(v))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True, choices=sorted(TARGETS))
    ap.add_argument("--base", default="host-cpu", help="the shipped profile to adapt (default host-cpu)")
    ap.add_argument("--minutes", type=float, default=10.0, help="bench adapt's budget (default 10)")
    ap.add_argument("--wait", type=float, default=10.0, help="minutes between bench adapt and the held-out timing")
    ap.add_argument("--route", default="auto", choices=("auto", "calibrate", "profile"))
    ap.add_argument("--held-out", default=HOST_HELD_OUT, help="zoo networks held out (default: every zoo family "
                                                              "at its resolution and the lighter ones at 160)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds of the held-out networks (default 7)")
    ap.add_argument("--affinity", default="1", help="CPU the 1-thread targets are pinned to (default 1)")
    ap.add_argument("--work", default="bench-data/adapt", help="databases and profiles")
    ap.add_argument("--skip-adapt", action="store_true", help="reuse the adapted profile of an earlier run")
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)

    from bench import cli as bench_cli
    from bench.calibrate import measure
    from bench.measure import make_runner
    from bench.network_sources import parse_zoo, zoo_specs
    from estimator.predict import Estimator
    from estimator.profile import load_profile

    t = TARGETS[args.target]
    options = dict(t["options"])
    if t["pin"]:
        options["affinity"] = args.affinity
    work = Path(args.work)
    root = work / "profiles"
    root.mkdir(parents=True, exist_ok=True)
    base = load_profile(args.base)
    name = f"{base.name}-adapt-{args.target}"
    stamp = work / f"{name}.done"
    if not args.skip_adapt:
        cmd = ["adapt", "--device", str(base.path), "--name", name, "--root", str(root), "--replace",
               "--db", str(work / f"{name}.sqlite"), "--minutes", str(args.minutes), "--route", args.route,
               "--runner", t["runner"], *_flags(options)]
        print(f"$ bench {' '.join(cmd)}", flush=True)
        t0 = time.monotonic()
        rc = bench_cli.main(cmd)
        adapt_s = time.monotonic() - t0
        if rc:
            return rc
        stamp.write_text(json.dumps({"seconds": adapt_s, "ended": time.time()}))
    done = json.loads(stamp.read_text())
    print(f"bench adapt: {done['seconds'] / 60:.1f} min wall (target <= {args.minutes:g})", flush=True)
    pause = done["ended"] + 60 * args.wait - time.time()
    if pause > 0:
        print(f"waiting {pause / 60:.1f} min so the held-out timing starts {args.wait:g} min after bench adapt",
              flush=True)
        time.sleep(pause)
    started = (time.time() - done["ended"]) / 60
    from bench.adapt import state_path

    route = json.loads(state_path(work / f"{name}.sqlite").read_text())["route"]
    specs = zoo_specs(parse_zoo(args.held_out))
    new = load_profile(name, root)
    held = measure(f"{name}-held-out", make_runner(t["runner"], dict(options)), specs, fusion=new.fusion_rules(),
                   db=work / f"{name}-held-out-{int(done['ended'])}.sqlite", rounds=args.rounds, runs=20, warmup=5,
                   precision=options.get("precision"), options=dict(options), progress=sys.stderr.isatty(), log=_log)
    spreads = sorted(r.spread_pct for r in held.results)
    print(f"held-out: {len(held.results)} zoo networks timed {started:.1f} min after bench adapt, in {args.rounds} "
          f"interleaved rounds (round-to-round spread median {spreads[len(spreads) // 2]:.1f} %, max "
          f"{spreads[-1]:.1f} %)")
    conf = 0.9
    doc: dict[str, Any] = {"target": args.target, "options": options, "adapt_seconds": done["seconds"],
                           "held_out_started_min_after": started, "profile": new.calibration}
    for label, est in ((f"shipped {base.name} as a user gets it", Estimator.from_profile(base)),
                       (f"{name}, adapted by route {route}", Estimator.from_profile(new))):
        ev = _evaluate(est, held.results, conf)
        doc[label] = ev
        _print_eval(label, ev, conf, per_network=True)
    ev = doc[list(doc)[-1]]
    c, u = ev["calibrated"], ev["uncalibrated"]
    lv = c["CM_LV"]
    print(f"\ntargets: bench adapt {done['seconds'] / 60:.1f} min (<= 10: {'met' if done['seconds'] <= 600 else 'MISSED'}); "
          f"held-out mean |error| {c['mean_abs_error_pct']:.1f} % (<= 6: "
          f"{'met' if c['mean_abs_error_pct'] <= 6 else 'MISSED'}; uncalibrated {u['mean_abs_error_pct']:.1f} %); "
          f"CM_LV 90 % {lv['covered']}/{lv['n']} at {lv['mean_rel_width']:.0%} (>= 90 % at <= 30 %: "
          f"{'met' if lv['covered'] >= 0.9 * lv['n'] and lv['mean_rel_width'] <= 0.30 else 'MISSED'})")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
