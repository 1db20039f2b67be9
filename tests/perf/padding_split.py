"""Measure a runner's *padding split*: the pad-in conv's share of a padding-only pair.

Smart padding (Eq. 4) bounds a layer's latency by ``T_c - T_b1`` and ``T_c - T_b2``, where
``T_b1`` / ``T_b2`` are padding-only pairs (Fig. 5b: conv 1x1 1 -> c, then conv 1x1
c -> 1) at the LUM's input and output shapes. What the padded model really spends on
padding is ``pad_in(input shape) + pad_out(output shape)``; if the pad-in conv is a
share ``alpha`` of every pair, that is ``alpha * T_b1 + (1 - alpha) * T_b2``, and the
estimator's training point becomes ``T_c - alpha * T_b1 - (1 - alpha) * T_b2`` (profile
``training.padding_split``, see :mod:`estimator.models`). The Eq. 4 midpoint is
``alpha = 0.5``.

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

    taskset -c 0 nice -n 5 python tests/perf/padding_split.py --runner vela \\
        --db bench-data/imx93.sqlite --env-id 1 --sample 150
    taskset -c 0 nice -n 5 python tests/perf/padding_split.py --runner onnxruntime \\
        --db bench-data/host-cpu.sqlite --env-id 1 --sample 40
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


def summary(alphas: np.ndarray) -> str:
    if alphas.size == 0:
        return "n=0"
    q05, q50, q95 = np.quantile(alphas, [0.05, 0.5, 0.95])
    return f"median {q50:.3f}, 5-95 % [{q05:.3f}, {q95:.3f}], n={alphas.size}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runner", required=True, choices=("vela", "onnxruntime"))
    ap.add_argument("--db", required=True, help="benchmark database whose padding keys to use")
    ap.add_argument("--env-id", type=int, default=1)
    ap.add_argument("--sample", type=int, default=0, help="random sample of this many keys (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=20, help="onnxruntime: timed runs per pair")
    ap.add_argument("--warmup", type=int, default=5, help="onnxruntime: warm-up runs per pair")
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime: intra-op threads")
    ap.add_argument("--json", default=None, help="write every pair's figures here")
    args = ap.parse_args(argv)

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
