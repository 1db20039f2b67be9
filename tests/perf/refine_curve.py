"""Held-out error against device minutes: sampling plans vs. a small plan + ``bench refine`` (issue 16).

Prints figures, asserts nothing. Three strategies build a layer profile for the same target;
each is trained and evaluated, **uncalibrated** (Eq. 7/8: what layer rows decide), on held-out
zoo networks measured whole on the target:

(i)   the FLOPs-balanced + network-prior sampling plan (``bench run --samples N
      --prior-samples N``) at growing N (``--sizes``), each measured into its own database;
(ii)  the small plan ``--samples 100 --prior-samples 100`` (``--small``), then ``bench refine``
      toward the **target set** for ``--refine-minutes`` of device time; one curve point per
      refine round;
(iii) the full default plan (``bench run``'s defaults, 1000 + 1000 per type): the rows of an
      existing database (``--full-db``, e.g. the run the shipped ``host-cpu`` profile was built
      from) that the default plan holds, when the machine is the one that measured it, else
      measured here (about 40 min on host-cpu).

Split (by family; names as ``estimator.zoo``): the target set is NAS-space samples
(``scaled``, ``mobilenet``, ``resnet`` spaces, seed 0) plus the zoo families of
:data:`TARGET_ZOO`; held out are the other zoo families (:data:`HELD_OUT`), whose layer
configurations ``bench refine`` is told never to measure (``--exclude-onnx``). The plans of
(i) and (iii) are random, so they may hold some of them by chance; (ii) never does.

Device minutes: for the plans, from the database's own timestamps (the environment's creation
to its last row: padding pairs, building and timing, as ``bench run`` spent them); for refine,
its measuring time (``Refined.device_seconds``), added to its small plan's. Every measurement
is committed to ``--work``'s databases as it is taken: a second run resumes and re-evaluates.

    taskset -c 1 python tests/perf/refine_curve.py --device host-cpu \\
        --full-db bench-data/s10/host-cpu-s10.sqlite
    python tests/perf/refine_curve.py --device imx93 --sizes 20,40 --small 40 --refine-minutes 10

Targets of issue 16: (ii) reaches (iii)'s held-out mean |error| in <= 1/3 of (iii)'s device
minutes, <= 6 % mean |error| on host-cpu within 20 device minutes, at a mean CM_LV width no
wider than (iii)'s.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

#: zoo families in the target set (both resolutions)
TARGET_ZOO = "mobilenet_v2,efficientnet_b0,squeezenet,regnet_x_400mf,vgg16,mobilenet_v2@160,efficientnet_b0@160," \
             "squeezenet@160,regnet_x_400mf@160"
#: held-out zoo families: never targets, never measured by refine
HELD_OUT = {"host-cpu": "resnet18,resnet50,mobilenet_v1,mobilenet_v3,shufflenet_v2,densenet121,googlenet,mnasnet,"
                        "yolov5s,resnet18@160,resnet50@160,mobilenet_v1@160,mobilenet_v3@160,shufflenet_v2@160,"
                        "densenet121@160,googlenet@160,mnasnet@160",
            "imx93": "resnet18,resnet50,mobilenet_v1,mobilenet_v3,shufflenet_v2,densenet121,googlenet,mnasnet,"
                     "yolov5s@320"}
#: NAS-space samples in the target set: space -> count (seed 0)
TARGET_SPACES = {"scaled": 7, "mobilenet": 7, "resnet": 6}  # space_specs' round robin
CONF = 0.9


def _log(text: str) -> None:
    print(f"  .. {text}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ profiles from databases

def _env_rows(db: Path, device: str, keys: set[str] | None = None) -> tuple[list[dict[str, Any]], float, int]:
    """(rows, device seconds, rows in all) of the one layer environment of ``device`` in
    ``db``, only the configurations in ``keys`` if given; device seconds: from the
    environment's creation to the last of those rows."""
    import sqlite3

    from bench.sampling import config_key
    from bench.storage import Store

    con = sqlite3.connect(db)
    envs = con.execute("SELECT env_id, created_at FROM environments WHERE device = ? AND env_id IN "
                       "(SELECT DISTINCT env_id FROM measurements)", (device,)).fetchall()
    if len(envs) != 1:
        raise SystemExit(f"{db}: expected one layer environment of {device}, found {len(envs)}")
    env_id, created = envs[0]
    stamps = con.execute("SELECT config_key, measured_at FROM measurements WHERE env_id = ?", (env_id,)).fetchall()
    con.close()
    with Store(db) as store:
        rows = store.export_rows(env_id)
    total = len(rows)
    if keys is not None:
        rows = [r for r in rows if config_key(r["layer_type"], json.loads(r["params"])) in keys]
        stamps = [(k, t) for k, t in stamps if k in keys]
    last = max(t for _, t in stamps)
    return rows, (datetime.fromisoformat(last) - datetime.fromisoformat(created)).total_seconds(), total


def _profile_from_rows(template: Any, name: str, root: Path, rows: list[dict[str, Any]], source: str) -> Any:
    """Profile ``name``: ``template``'s fusion rules and runner, ``rows``, no network rows."""
    from estimator.dataset import write_measurements
    from estimator.profile import MEASUREMENTS_FILE, load_profile, staged_profile, write_profile_json

    meta = template.to_dict()
    for k in ("calibration", "refined"):
        meta.pop(k, None)
    meta["name"] = name
    meta["description"] = f"refine_curve.py strategy profile: {source}"
    meta["provenance"] = {**(meta.get("provenance") or {}), "source": source,
                          "date": datetime.now().astimezone().isoformat(timespec="seconds")}
    with staged_profile(root, name, "curve") as tmp:
        write_profile_json(tmp, meta)
        write_measurements(tmp / MEASUREMENTS_FILE, rows)
    return load_profile(name, root)


def _measure_plan(runner_name: str, options: dict[str, Any], db: Path, device: str, samples: int,
                  args: argparse.Namespace) -> None:
    from bench.measure import make_runner, measure_plan
    from bench.sampling import SAMPLED_TYPES, limits_for, make_plan

    plan = make_plan(list(SAMPLED_TYPES), samples, prior_samples=samples, seed=0, limits=limits_for(runner_name))
    runner = make_runner(runner_name, dict(options))
    try:
        stats, _, total = measure_plan(runner, db, device, plan, warmup=args.warmup, runs=args.runs,
                                       progress=sys.stderr.isatty(),
                                       announce=lambda env: _log(f"plan {samples} + {samples}: {len(plan)} "
                                                                 f"configurations -> {db}"))
    finally:
        runner.close()
    _log(f"plan {samples} + {samples}: {stats.measured} measured now, {total} rows")


# ------------------------------------------------------------------ evaluation

def _evaluate(profile: Any, truth: list[Any]) -> dict[str, Any]:
    from estimator.predict import Estimator

    est = Estimator.from_profile(profile)
    rows = []
    for r in truth:
        e = est.estimate_network(r.spec.weightless_onnx, [CONF], per_layer=False, name=r.spec.name, calibrate=False)
        lo, hi = e.intervals["CM_LV"][CONF]
        olo, ohi = e.intervals["CM_O"][CONF]
        y = r.measured_ms
        rows.append({"name": r.spec.name, "measured_ms": y, "pred_ms": e.total_ms,
                     "err_pct": 100 * (e.total_ms - y) / y, "lv_covered": lo <= y <= hi,
                     "lv_rel_width": (hi - lo) / y, "o_rel_width": (ohi - olo) / y})
    errs = [abs(x["err_pct"]) for x in rows]
    return {"mean_abs_error_pct": statistics.fmean(errs), "max_abs_error_pct": max(errs),
            "within_5pct": sum(e <= 5 for e in errs), "within_10pct": sum(e <= 10 for e in errs), "n": len(rows),
            "lv_covered": sum(x["lv_covered"] for x in rows),
            "lv_mean_rel_width_pct": 100 * statistics.fmean(x["lv_rel_width"] for x in rows),
            "o_mean_rel_width_pct": 100 * statistics.fmean(x["o_rel_width"] for x in rows),
            "rows": sum(1 for _ in profile.rows()), "networks": rows}


def _point(strategy: str, label: str, minutes: float, ev: dict[str, Any]) -> dict[str, Any]:
    p = {"strategy": strategy, "label": label, "device_minutes": minutes,
         **{k: v for k, v in ev.items() if k != "networks"}, "networks": ev["networks"]}
    print(f"{strategy:>4} {label:<34} {minutes:7.2f} min {ev['rows']:>6} rows  mean |err| "
          f"{ev['mean_abs_error_pct']:5.1f} %  max {ev['max_abs_error_pct']:5.1f} %  within 5/10 %: "
          f"{ev['within_5pct']:>2}/{ev['within_10pct']:>2} of {ev['n']}  CM_LV {ev['lv_covered']:>2}/{ev['n']} "
          f"width {ev['lv_mean_rel_width_pct']:5.0f} %  CM_O width {ev['o_mean_rel_width_pct']:5.0f} %", flush=True)
    return p


# ------------------------------------------------------------------ the run

def run(args: argparse.Namespace) -> dict[str, Any]:
    from bench.calibrate import measure
    from bench.measure import make_runner
    from bench.network_plan import held_out_keys
    from bench.network_sources import parse_zoo, space_specs, zoo_specs
    from bench.refine import load_targets, refine
    from bench.sampling import SAMPLED_TYPES, limits_for, make_plan
    from estimator.profile import load_profile

    template = load_profile(args.device)
    runner_name = template.runner
    options = {"threads": template.threads} if runner_name == "onnxruntime" else {}
    work = Path(args.work or f"bench-data/refine-curve/{args.device}")
    root = work / "profiles"
    root.mkdir(parents=True, exist_ok=True)
    fusion = template.fusion_rules()
    doc: dict[str, Any] = {"device": args.device, "runner": runner_name, "options": options,
                           "target_zoo": TARGET_ZOO, "target_spaces": TARGET_SPACES,
                           "held_out": HELD_OUT[args.device], "points": []}

    # held-out truth, and the held-out networks as ONNX files for --exclude-onnx
    held_specs = zoo_specs(parse_zoo(HELD_OUT[args.device]))
    truth = measure(args.device, make_runner(runner_name, dict(options)), held_specs, fusion=fusion,
                    db=work / "truth.sqlite", rounds=args.truth_rounds, runs=args.runs, warmup=args.warmup,
                    options=options, progress=sys.stderr.isatty(), log=_log).results
    held_dir = work / "held-out"
    held_dir.mkdir(exist_ok=True)
    for s in held_specs:
        f = held_dir / f"{s.name.replace(':', '_').replace('@', '_')}.onnx"
        if not f.exists():
            f.write_bytes(s.build())
    print(f"held out ({args.device}, {runner_name} {options}): {len(truth)} zoo networks, "
          f"{', '.join(sorted({s.family for s in held_specs}))}")
    print(f"target set: {', '.join(f'{n} {k}' for k, n in TARGET_SPACES.items())} space samples (seed 0) + zoo "
          f"{TARGET_ZOO}")
    points = doc["points"]

    # (iii) the full default plan
    full_ref = full_prof = None
    if args.full_db:
        plan = {c.key for c in make_plan(list(SAMPLED_TYPES), 1000, prior_samples=1000, seed=0,
                                         limits=limits_for(runner_name))}
        keep, secs, total = _env_rows(Path(args.full_db), args.device, plan)
        prof = _profile_from_rows(template, f"{args.device}-plan1000", root, keep,
                                  f"the default plan's {len(keep)} rows of {args.full_db}")
        points.append(_point("iii", f"default plan 1000+1000 (--full-db, {len(keep)} of {total} rows)",
                             secs / 60, _evaluate(prof, truth)))
        full_ref, full_prof = points[-1], prof

    if args.full_profile:
        if args.full_minutes is None:
            raise SystemExit("--full-profile needs --full-minutes (the device minutes its rows took)")
        prof = load_profile(args.full_profile)
        points.append(_point("iii", f"profile {prof.name} (--full-profile)", args.full_minutes,
                             _evaluate(prof, truth)))
        full_ref, full_prof = points[-1], prof

    def plan_point(n: int) -> tuple[dict[str, Any], Any, float]:
        db = work / f"plan{n}.sqlite"
        _measure_plan(runner_name, options, db, args.device, n, args)
        rows, secs, _ = _env_rows(db, args.device)
        prof = _profile_from_rows(template, f"{args.device}-plan{n}", root, rows, f"plan {n} + {n}: {db}")
        strategy = "iii" if n == 1000 else "i"
        points.append(_point(strategy, f"plan {n}+{n}", secs / 60, _evaluate(prof, truth)))
        return points[-1], prof, secs

    # (i) the small plan first: it is (ii)'s start
    small_point, small_prof, small_secs = plan_point(args.small)

    # (ii) the small plan, then bench refine toward the target set
    specs = space_specs(list(TARGET_SPACES), sum(TARGET_SPACES.values()), seed=0)
    specs += zoo_specs(parse_zoo(TARGET_ZOO))
    targets = load_targets(specs, fusion)
    exclude = held_out_keys([held_dir], fusion=fusion)
    print(f"refine: {len(targets)} targets, {len(exclude)} held-out configurations excluded", flush=True)
    points.append(dict(small_point, strategy="ii", label="small plan, before refining"))
    name = f"{args.device}-small-refined"
    log_path = work / "refine-rounds.json"  # the points of earlier (interrupted) refine runs
    earlier = json.loads(log_path.read_text()) if log_path.exists() else []
    for x in earlier:
        points.append(dict(x["point"], strategy="ii"))

    def report(r: Any) -> None:
        if r.round == 0:
            return
        ev = _evaluate(load_profile(name, root), truth)
        # r.device_seconds: every round so far, earlier (killed) runs' included (bench.refine)
        points.append(_point("ii", f"refine round {r.round} (+{r.measured} configs)",
                             (small_secs + r.device_seconds) / 60, ev))
        earlier.append({"point": points[-1]})
        log_path.write_text(json.dumps(earlier, default=str))

    t0 = time.monotonic()
    out = refine(small_prof, name, root, targets, make_runner(runner_name, dict(options)),
                 db=work / "refine.sqlite", limits=limits_for(runner_name), rounds=args.refine_rounds,
                 minutes=args.refine_minutes, top=args.top, neighbours=args.neighbours,
                 exclude_keys=exclude,
                 excluded=[{"name": f.stem, "path": str(f)} for f in sorted(held_dir.glob("*.onnx"))],
                 warmup=args.warmup, runs=args.runs, min_gain=0.0, progress=False, report=report, log=_log)
    print(f"refine: {out.added} rows in the refined profile, {out.run_seconds / 60:.2f} device min this run "
          f"({out.device_seconds / 60:.2f} in all), {(time.monotonic() - t0) / 60:.1f} min wall; "
          f"stopped: {out.stopped}")

    # (i) the other sizes, and (iii) measured here when no --full-db
    for n in sorted(set(args.sizes) - {args.small}):
        plan_point(n)
    if full_ref is None:
        full_ref, full_prof, _ = plan_point(1000)

    # drift: the held-out networks measured again at the end (a timing runner's; a cost model's
    # estimate does not drift)
    again = [] if template.provenance.kind == "estimated" else measure(
        f"{args.device}-again", make_runner(runner_name, dict(options)), held_specs, fusion=fusion,
        db=work / "truth-end.sqlite", rounds=3, runs=args.runs, warmup=args.warmup, options=options,
        progress=sys.stderr.isatty(), log=_log).results
    ratios = sorted(b.measured_ms / a.measured_ms for a, b in zip(truth, again))
    doc["drift"] = ratios and {"median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1]}
    if ratios:
        print(f"drift: the held-out networks measured again at the end run {statistics.median(ratios):.3f}x the truth "
              f"(median; range {ratios[0]:.3f}-{ratios[-1]:.3f})")
    if args.full_truth_db:
        old = _stored_truth(Path(args.full_truth_db), [t.spec.name for t in truth])
        if old:
            mine = [t for t in truth if t.spec.name in old]
            print(f"(iii) against the held-out truth measured with it ({args.full_truth_db}, {len(old)} networks): "
                  f"mean |error| {_mean_err(full_ref, old):.1f} %; that truth over today's: median "
                  f"{statistics.median(old[t.spec.name] / t.measured_ms for t in mine):.3f}")

    # the target set's own widths (what refine narrows; no truth needed): each strategy's
    # final profile, mean CM_LV and CM_O width relative to the estimate
    from bench.refine import estimate_targets, widths
    from estimator.predict import Estimator

    doc["target_widths"] = {}
    for label, prof in (("iii", full_prof), ("small plan", small_prof), ("ii", load_profile(name, root))):
        ws = widths(estimate_targets(Estimator.from_profile(prof), targets))
        lv = 100 * statistics.fmean(w.lv_width / w.total_ms for w in ws)
        o = 100 * statistics.fmean(w.o_width / w.total_ms for w in ws)
        doc["target_widths"][label] = {"CM_LV_pct": lv, "CM_O_pct": o}
        print(f"target set ({len(ws)} networks), {label} ({prof.name}): mean CM_LV width {lv:.0f} %, CM_O {o:.0f} % "
              f"of the estimate")

    # the acceptance comparison
    ref = full_ref
    ii = [p for p in points if p["strategy"] == "ii"]
    # reached: the first point from which every later one is at or below (iii)'s error
    reach = next((p for i, p in enumerate(ii) if all(q["mean_abs_error_pct"] <= ref["mean_abs_error_pct"]
                                                     for q in ii[i:])), None)
    best20 = [p for p in ii if p["device_minutes"] <= 20]
    summary = {"iii_minutes": ref["device_minutes"], "iii_error_pct": ref["mean_abs_error_pct"],
               "iii_lv_width_pct": ref["lv_mean_rel_width_pct"],
               "ii_reaches_iii_at_minutes": reach and reach["device_minutes"],
               "ii_reaches_iii_width_pct": reach and reach["lv_mean_rel_width_pct"],
               "ii_best_error_within_20_min_pct": min((p["mean_abs_error_pct"] for p in best20), default=None)}
    doc["summary"] = summary
    print()
    print(f"(iii) default plan: {ref['mean_abs_error_pct']:.1f} % mean |error| at {ref['device_minutes']:.1f} device "
          f"min, CM_LV width {ref['lv_mean_rel_width_pct']:.0f} %")
    if reach:
        print(f"(ii) reaches it at {reach['device_minutes']:.1f} device min "
              f"({reach['device_minutes'] / ref['device_minutes']:.2f} of (iii)'s; target <= 0.33), CM_LV width "
              f"{reach['lv_mean_rel_width_pct']:.0f} %")
    else:
        print(f"(ii) does not reach it within {ii[-1]['device_minutes']:.1f} device min (best "
              f"{min(p['mean_abs_error_pct'] for p in ii):.1f} %)")
    print(f"(ii) best mean |error| within 20 device min: {summary['ii_best_error_within_20_min_pct']:.1f} % "
          f"(target <= 6 % on host-cpu)")
    return doc


def _stored_truth(db: Path, names: list[str]) -> dict[str, float]:
    """Held-out latencies stored in another measurement database (median of its rounds'
    medians, the one environment of the base device that has them)."""
    import sqlite3

    con = sqlite3.connect(db)
    out: dict[str, float] = {}
    for name in names:
        meds = [m for (m,) in con.execute("SELECT median_ms FROM network_rounds WHERE name = ?", (name,))]
        if meds:
            out[name] = statistics.median(meds)
    con.close()
    return out


def _mean_err(point: dict[str, Any], truth: dict[str, float]) -> float:
    return statistics.fmean(abs(n["pred_ms"] / truth[n["name"]] - 1) * 100 for n in point["networks"]
                            if n["name"] in truth)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="host-cpu", choices=sorted(HELD_OUT))
    p.add_argument("--work", default=None, help="databases and profiles (default bench-data/refine-curve/DEVICE)")
    p.add_argument("--full-db", default=None, help="database of a full default-plan run on this machine (iii)")
    p.add_argument("--full-profile", default=None,
                   help="(iii) is this installed profile's rows (uncalibrated) instead of a default-plan database")
    p.add_argument("--full-minutes", type=float, default=None, help="the device minutes --full-profile's rows took")
    p.add_argument("--full-truth-db", default=None,
                   help="held-out networks measured when --full-db was (its (iii) error is printed against them too)")
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[50, 200],
                   help="plan sizes of (i), comma-separated (default 50,200; --small is added)")
    p.add_argument("--small", type=int, default=100, help="(ii)'s plan: --samples N --prior-samples N (default 100)")
    p.add_argument("--refine-minutes", type=float, default=15.0)
    p.add_argument("--refine-rounds", type=int, default=100)
    p.add_argument("--top", type=int, default=100)
    p.add_argument("--neighbours", type=int, default=2)
    p.add_argument("--truth-rounds", type=int, default=7)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", default=None, help="write every point here")
    args = p.parse_args(argv)
    doc = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
