"""Measure a runner's *padding split*: the pad-in conv's share of a padding-only pair.

Smart padding (Eq. 4) bounds a layer's latency by ``T_c - T_b1`` and ``T_c - T_b2``, where
``T_b1`` / ``T_b2`` are padding-only pairs (Fig. 5b: conv 1x1 1 -> c, then conv 1x1
c -> 1) at the LUM's input and output shapes. What the padded model really spends on
padding is ``pad_in(input shape) + pad_out(output shape)``; if the pad-in conv is a
share ``alpha`` of every pair, that is ``alpha * T_b1 + (1 - alpha) * T_b2``, and a
row's training point would be ``T_c - alpha * T_b1 - (1 - alpha) * T_b2``. The Eq. 4
midpoint is ``alpha = 0.5``. A pair is not the padding inside a padded model (below), so a
profile's per-type splits (``training.padding_split_by_type``, see :mod:`estimator.models`)
come from ``--lum-types``, which prints the pairs' median ``alpha`` (``--pair-alpha``) beside
its fits for comparison.

This script measures ``alpha`` from the runner's own per-operator figures, on padding
pairs only (never on validation networks): it takes the ``(h, w, c)`` keys of a
database's padding table (all of them, or a seeded random sample), builds each pair
(:func:`bench.modelgen.padding_model`), runs it through the runner and splits the
runner's per-operator times into the pad-in side and the pad-out side:

* ``vela``: the per-operator cycles of Vela's per-layer CSV (``VelaRunner.per_layer``,
  keyed by output tensor name). Operators whose name contains ``pad_in`` are the pad-in
  conv (``pad_in/Relu;pad_in/BiasAdd;pad_in/Conv2D;...``); the others (the pad-out conv
  and its output ops, named after the graph output) are the pad-out side. The script
  checks that the per-operator sum equals Vela's network estimate and the stored LUT time.
* ``onnxruntime``: the runner's ``per_layer()`` (ORT's profiler, median kernel time per
  node over ``--runs`` runs). Nodes whose name contains ``pad_in`` (the conv, possibly
  renamed after its output ``pad_in_out_nchwc``) and the ``ReorderInput`` layout
  transform are the pad-in side; the rest (``y_nchwc``, ``ReorderOutput``) the pad-out
  side. Kernel times leave out ORT's per-run overhead between kernels, and on a shared
  CPU they are noisy: pin the process (``taskset -c 0``).

It prints the median, the 5-95 % range and the number of pairs, the same by
channel-count bucket, and optionally writes every pair's figures as JSON.

**Per layer type** (``--lum-types conv2d,dwconv2d,...`` with ``--rows`` a profile's
``measurements.csv``, Vela only). A padding pair is not the padding inside a padded model:
on Vela the pad-out conv after a stride-2 LUM costs up to 4x the pad-out half of its pair
(Vela schedules the pair's c-channel map differently), so one ``alpha`` does not fit every
layer type. This mode takes a seeded sample of a type's *benchmark rows* (never
validation networks), recompiles each padded model (Fig. 5c) and reads the LUM's own
per-operator time ``T_lum`` (operators named ``lum/...``) next to the row's stored
``T_c``, ``T_b1``, ``T_b2``. Per type it fits the split ``a`` in [0, 1] (0.01 grid) that
minimises the mean relative error ``|clip(T_c - a T_b1 - (1 - a) T_b2, lo, hi) - T_lum| /
T_lum``, capped at 100 % per row (the forests fit ``log(t_op)``, so rows count alike; a
point clipped to 0 counts 100 %), scores it two-fold (fit on one seeded half, score on the other, both ways)
against ``a = 0.5`` (the midpoint) and the pairs' median ``alpha``, and fits the final
``a`` on all rows; ``--json`` writes the rows, the fits and a ``padding_split_by_type``
mapping (the types whose fitted ``a`` beats the midpoint held out) for a profile's
``training``. Concatenations are left out:
Vela names the pad-in convs that write into a concat after the concat, so its own time
cannot be read. Rows whose interval is a point (``T_b1 == T_b2``, e.g. stride-1 depthwise
convs, activations) do not depend on ``a`` and are skipped.

    taskset -c 0 nice -n 5 python tests/perf/padding_split.py --runner vela \\
        --db bench-data/imx93.sqlite --env-id 1 --sample 150
    taskset -c 0 nice -n 5 python tests/perf/padding_split.py --runner onnxruntime \\
        --db bench-data/host-cpu.sqlite --env-id 1 --sample 40
    taskset -c 0 nice -n 5 python tests/perf/padding_split.py --runner vela \\
        --rows profiles/imx93/measurements.csv \\
        --lum-types conv2d,dwconv2d,add,mul,maxpool,avgpool,globalpool,fc,resize --sample 60
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from bench.modelgen import padding_model  # noqa: E402
from bench.runners.base import get_runner  # noqa: E402
from bench.smartpad import render_model  # noqa: E402


def pad_in_side(runner: str, name: str) -> bool:
    """Whether a per-operator row of a padding pair belongs to the pad-in conv."""
    return "pad_in" in name or (runner == "onnxruntime" and name.startswith("ReorderInput"))


def padding_keys(db: Path, env_id: int) -> dict[tuple[int, int, int], float]:
    """``(h, w, c) -> stored median ms`` of a database's padding table for one environment."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT h, w, c, median_ms FROM padding WHERE env_id=?", (env_id,)).fetchall()
    finally:
        con.close()
    if not rows:
        raise SystemExit(f"{db}: no padding pairs for env {env_id}")
    return {(int(h), int(w), int(c)): float(t) for h, w, c, t in rows}


def measure(runner: Any, name: str, key: tuple[int, int, int], runs: int, warmup: int) -> dict[str, Any]:
    ir = padding_model(*key)
    prepared = runner.prepare(render_model(ir, runner.model_format))
    if name == "onnxruntime":
        per = runner.per_layer(prepared, warmup=warmup, runs=runs)
    else:
        per = runner.per_layer(prepared)
    t_in = sum(v for k, v in per.items() if pad_in_side(name, k))
    t_out = sum(v for k, v in per.items() if not pad_in_side(name, k))
    total = runner.time(prepared, warmup=warmup, runs=runs).median_ms
    return {"key": list(key), "pad_in_ms": t_in, "pad_out_ms": t_out, "ops_sum_ms": t_in + t_out,
            "pair_ms": total, "alpha": t_in / (t_in + t_out) if t_in + t_out > 0 else float("nan"),
            "ops": sorted(per)}


# ------------------------------------------------------------------ per layer type (--lum-types)

#: types whose LUM time cannot be read from the runner's per-operator figures
LUM_UNREADABLE = {"concat": "Vela names the pad-in convs writing into a concat after the concat"}


def is_lum_op(name: str) -> bool:
    """Whether a per-operator row of a padded model is the LUM's (named ``lum/...``)."""
    return "pad_in" not in name and any(p.startswith("lum/") or p == "lum" for p in name.split(";"))


def lum_sample(rows_csv: Path, types: list[str], n: int, seed: int, min_rel_gap: float = 0.05
               ) -> dict[str, list[dict[str, Any]]]:
    """A seeded sample of ``n`` benchmark rows per type whose Eq. 4 interval is not a point
    (``|T_b1 - T_b2| > min_rel_gap * max(T_b1, T_b2)``, ``T_b1 > 0``)."""
    from estimator.dataset import read_measurements

    by: dict[str, list[dict[str, Any]]] = {t: [] for t in types}
    for r in read_measurements(rows_csv):
        t = r["layer_type"]
        if t not in by:
            continue
        tc, b1, b2 = r["t_padded_ms"], r["t_b1_ms"], r["t_b2_ms"]
        if all(np.isfinite(x) for x in (tc, b1, b2)) and b1 > 0 and abs(b1 - b2) > min_rel_gap * max(b1, b2):
            by[t].append(r)
    return {t: (random.Random(f"{seed}:{t}").sample(rs, n) if n and n < len(rs) else rs) for t, rs in by.items()}


def lum_in_padded(runner: Any, layer_type: str, params: dict[str, Any]) -> tuple[Any, dict[str, float]]:
    """Compile a configuration's padded model (Fig. 5c): ``(prepared model, {LUM operator:
    its own per-operator time})``, the latter empty where the runner names no LUM operator."""
    from bench.modelgen import padded_model

    prepared = runner.prepare(render_model(padded_model(layer_type, params), runner.model_format))
    return prepared, {k: v for k, v in runner.per_layer(prepared).items() if is_lum_op(k)}


def measure_lum(runner: Any, row: dict[str, Any]) -> dict[str, Any]:
    """The LUM's own per-operator time inside its padded model, next to the stored row."""
    prepared, lum = lum_in_padded(runner, row["layer_type"], row["params"])
    if not lum:
        raise ValueError(f"no LUM operator among {sorted(runner.per_layer(prepared))}")
    lo, hi = sorted((row["t_lum_lo_ms"], row["t_lum_hi_ms"]))
    return {"layer_type": row["layer_type"], "params": row["params"], "t_c": row["t_padded_ms"],
            "t_b1": row["t_b1_ms"], "t_b2": row["t_b2_ms"], "lo": max(lo, 0.0), "hi": max(hi, 0.0),
            "t_lum": sum(lum.values()), "t_c_recompiled": runner.time(prepared).median_ms, "lum_ops": sorted(lum)}


def split_point(r: dict[str, Any], a: float) -> float:
    """The training point of a row at split ``a``: :func:`estimator.models._training_point`
    itself, so that ``a = 0.5`` is the midpoint of the (0-clipped) interval, as training
    uses it."""
    from estimator.models import _training_point

    return _training_point({"t_padded_ms": r["t_c"], "t_b1_ms": r["t_b1"], "t_b2_ms": r["t_b2"]},
                           r["lo"], r["hi"], "lum", a)


def split_error(rs: list[dict[str, Any]], a: float) -> float:
    """Mean relative error min(|training point - T_lum| / T_lum, 1) over rows with T_lum > 0
    (the fit's criterion: the forests fit log(t_op), so every row counts alike whatever its
    size; capped at 100 %, the error of a point clipped to 0 ms, so that rows whose own
    per-operator time is nearly 0, an operator Vela folds into its neighbour, do not decide)."""
    ok = [r for r in rs if r["t_lum"] > 0]
    return sum(min(abs(split_point(r, a) - r["t_lum"]) / r["t_lum"], 1.0) for r in ok) / max(len(ok), 1)


def sum_error(rs: list[dict[str, Any]], a: float) -> float:
    """Summed |training point - T_lum| over the summed T_lum (what a sum over layers sees)."""
    return sum(abs(split_point(r, a) - r["t_lum"]) for r in rs) / max(sum(r["t_lum"] for r in rs), 1e-12)


def fit_split(rs: list[dict[str, Any]]) -> float:
    """The ``a`` on a 0.01 grid with the least :func:`split_error` (ties: nearest 0.5)."""
    grid = np.round(np.linspace(0.0, 1.0, 101), 2)
    errs = np.array([split_error(rs, float(a)) for a in grid])
    best = np.flatnonzero(errs <= errs.min() * (1 + 1e-9))
    return float(grid[best[np.argmin(np.abs(grid[best] - 0.5))]])


def lum_main(args: argparse.Namespace, runner: Any) -> int:
    types = [t.strip() for t in args.lum_types.split(",") if t.strip()]
    for t in [t for t in types if t in LUM_UNREADABLE]:
        print(f"{t}: skipped ({LUM_UNREADABLE[t]})")
    types = [t for t in types if t not in LUM_UNREADABLE]
    sample = lum_sample(Path(args.rows), types, args.sample, args.seed)
    out: dict[str, Any] = {"runner": args.runner, "rows": args.rows, "sample": args.sample, "seed": args.seed,
                           "pair_alpha": args.pair_alpha, "types": {}, "padding_split_by_type": {}}
    t0 = time.monotonic()
    for t in types:
        res, failed = [], []
        for row in sample[t]:
            try:
                res.append(measure_lum(runner, row))
            except Exception as e:  # noqa: BLE001 - report and go on
                failed.append(f"{row['params']}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        if len(res) < 4:
            print(f"{t}: {len(res)} rows measured ({len(failed)} failed), too few to fit", flush=True)
            continue
        idx = list(range(len(res)))
        random.Random(f"{args.seed}:{t}:halves").shuffle(idx)
        halves = [[res[i] for i in idx[: len(idx) // 2]], [res[i] for i in idx[len(idx) // 2:]]]
        # two-fold: fit on one half, score on the other, both ways
        a_half = [fit_split(h) for h in halves]
        cands = (("0.5", 0.5), (f"{args.pair_alpha:g}", args.pair_alpha), ("fit", None))  # None: the other half's fit

        def held_out(err: Any, a: float | None) -> float:
            return float(np.mean([err(halves[1 - k], a_half[k] if a is None else a) for k in (0, 1)]))

        cv = {name: held_out(split_error, a) for name, a in cands}
        cv_sum = {name: held_out(sum_error, a) for name, a in cands}
        a_all = fit_split(res)
        dev = max(abs(r["t_c_recompiled"] - r["t_c"]) / r["t_c"] for r in res)
        use = cv["fit"] < cv["0.5"]
        print(f"{t:11s} n={len(res):3d} ({len(failed)} failed, {time.monotonic() - t0:4.0f} s)  held-out mean "
              f"|point - T_lum| / T_lum (2-fold): a=0.5 {cv['0.5']:6.1%}  a={args.pair_alpha:g} "
              f"{cv[f'{args.pair_alpha:g}']:6.1%}  a fitted ({a_half[0]:.2f}, {a_half[1]:.2f}) {cv['fit']:6.1%}; "
              f"summed: {cv_sum['0.5']:6.1%} / {cv_sum[f'{args.pair_alpha:g}']:6.1%} / {cv_sum['fit']:6.1%}  "
              f"-> a={a_all:.2f} (all rows){'' if use else ' NOT used (no better than 0.5)'}; "
              f"recompiled T_c max |dev| {dev:.2%}", flush=True)
        out["types"][t] = {"n": len(res), "failed": failed, "a_fit_halves": a_half, "a_all": a_all,
                           "held_out_mean_rel_err": cv, "held_out_sum_err": cv_sum, "rows": res}
        if use:
            out["padding_split_by_type"][t] = a_all
    print(f"padding_split_by_type: {json.dumps(out['padding_split_by_type'])}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


def summary(alphas: np.ndarray) -> str:
    if alphas.size == 0:
        return "n=0"
    q05, q50, q95 = np.quantile(alphas, [0.05, 0.5, 0.95])
    return f"median {q50:.3f}, 5-95 % [{q05:.3f}, {q95:.3f}], n={alphas.size}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runner", required=True, choices=("vela", "onnxruntime"))
    ap.add_argument("--db", default=None, help="benchmark database whose padding keys to use (pairs)")
    ap.add_argument("--env-id", type=int, default=1)
    ap.add_argument("--sample", type=int, default=0, help="random sample of this many keys (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=20, help="onnxruntime: timed runs per pair")
    ap.add_argument("--warmup", type=int, default=5, help="onnxruntime: warm-up runs per pair")
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime: intra-op threads")
    ap.add_argument("--json", default=None, help="write every pair's figures here")
    ap.add_argument("--lum-types", default=None, help="per layer type instead of pairs (vela): comma-separated types")
    ap.add_argument("--rows", default=None, help="--lum-types: a measurements.csv whose rows to sample (per type)")
    ap.add_argument("--pair-alpha", type=float, default=0.742, help="--lum-types: the pairs' median alpha, for comparison")
    args = ap.parse_args(argv)
    if args.lum_types:
        if args.runner != "vela" or not args.rows:
            ap.error("--lum-types needs --runner vela and --rows CSV")
        return lum_main(args, get_runner("vela"))
    if not args.db:
        ap.error("--db is required (or --lum-types with --rows)")

    stored = padding_keys(Path(args.db), args.env_id)
    keys = sorted(stored)
    if args.sample and args.sample < len(keys):
        keys = sorted(random.Random(args.seed).sample(keys, args.sample))
    runner = get_runner(args.runner, threads=args.threads) if args.runner == "onnxruntime" else get_runner(args.runner)
    print(f"{args.runner}: {len(keys)} of {len(stored)} padding keys of {args.db} env {args.env_id}"
          f"{f' (seed {args.seed})' if args.sample else ''}", flush=True)
    res: list[dict[str, Any]] = []
    failed: list[str] = []
    t0 = time.monotonic()
    for i, key in enumerate(keys, 1):
        try:
            r = measure(runner, args.runner, key, args.runs, args.warmup)
        except Exception as e:  # noqa: BLE001 - report and go on
            failed.append(f"{key}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        r["stored_ms"] = stored[key]
        res.append(r)
        if i % 10 == 0 or i == len(keys):
            print(f"  {i}/{len(keys)} pairs, {time.monotonic() - t0:.0f} s; running {summary(np.array([x['alpha'] for x in res]))}",
                  flush=True)
    alphas = np.array([r["alpha"] for r in res if np.isfinite(r["alpha"])])
    print(f"\npadding split alpha = pad_in / (pad_in + pad_out), {args.runner}: {summary(alphas)}")
    if failed:
        print(f"failed pairs: {len(failed)} (first: {failed[0]})")
    if args.runner == "vela" and res:
        dev_total = max(abs(r["ops_sum_ms"] - r["pair_ms"]) / r["pair_ms"] for r in res)
        dev_lut = max(abs(r["pair_ms"] - r["stored_ms"]) / r["stored_ms"] for r in res)
        print(f"checks: per-operator sum vs Vela's network estimate max |dev| {dev_total:.2%}; "
              f"network estimate vs stored LUT time max |dev| {dev_lut:.2%}")
    elif res:
        cover = np.median([r["ops_sum_ms"] / r["pair_ms"] for r in res])
        print(f"checks: kernel-time sum / pair latency median {cover:.2f} (the rest is ORT overhead between kernels)")
    print("by channels c:")
    for lo, hi in ((1, 3), (4, 31), (32, 127), (128, 511), (512, 1 << 30)):
        a = np.array([r["alpha"] for r in res if lo <= r["key"][2] <= hi and np.isfinite(r["alpha"])])
        if a.size:
            print(f"  c {lo}-{hi if hi < 1 << 30 else 'max'}: {summary(a)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"runner": args.runner, "db": args.db, "env_id": args.env_id,
                                               "sample": args.sample, "seed": args.seed,
                                               "summary": summary(alphas), "pairs": res, "failed": failed}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
