"""How long does ``bench run`` take on this machine? (a script, not a test)

Estimates the wall time of the default host plan (``bench run --runner onnxruntime``: all
benchable types, 1000 configurations each, default limits, warm-up 5, runs 20) and of
``--samples 20``, and measures the latter for real (unless ``--no-measure``).

Estimate: per layer type, ``--probe`` configurations spread evenly over the plan's ops
range are measured exactly as ``bench run`` does (single-layer + padded model, including
model generation and session creation); each planned configuration's time is then
interpolated on log(time) vs log(ops) within its type. Padding pairs are estimated the
same way on log(h*w*c). Timings taken beside other work are noisy; run it on a quiet
machine for figures you report.

    python tests/perf/bench_plan_runtime.py                 # estimate + measure --samples 20
    python tests/perf/bench_plan_runtime.py --probe 3 --no-measure --runs 5   # smoke
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.runners.onnxruntime_runner import OnnxRuntimeRunner  # noqa: E402
from bench.sampling import SAMPLED_TYPES, limits_for, make_plan  # noqa: E402
from bench.smartpad import SmartPad, needed_padding  # noqa: E402
from bench.storage import Store  # noqa: E402


def _interp_total(x_probe: list[float], t_probe: list[float], xs: list[float]) -> float:
    order = np.argsort(x_probe)
    lx = np.log(np.asarray(x_probe, float)[order])
    lt = np.log(np.maximum(np.asarray(t_probe, float)[order], 1e-6))
    return float(np.exp(np.interp(np.log(np.asarray(xs, float)), lx, lt)).sum())


def _fmt(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else (f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.2f} h")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=1000, help="per type in the default plan (default 1000)")
    ap.add_argument("--small", type=int, default=20, help="per type in the small plan (default 20)")
    ap.add_argument("--probe", type=int, default=8, help="configurations measured per type for the estimate")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-ops", type=float, default=None, help="default: the onnxruntime runner's limit")
    ap.add_argument("--no-measure", action="store_true", help="do not run the small plan for real")
    a = ap.parse_args(argv)

    lim = limits_for("onnxruntime", max_ops=a.max_ops)
    runner = OnnxRuntimeRunner(threads=a.threads)
    t_plan = time.monotonic()
    full = make_plan(list(SAMPLED_TYPES), a.samples, limits=lim)
    small = make_plan(list(SAMPLED_TYPES), a.small, limits=lim)
    t_plan = time.monotonic() - t_plan
    print(f"plans built in {t_plan:.1f} s: default {len(full)} configurations / {len(needed_padding(full))} padding "
          f"pairs; --samples {a.small}: {len(small)} / {len(needed_padding(small))}; max ops {lim.max_ops:.3g}, "
          f"warmup {a.warmup}, runs {a.runs}, threads {a.threads}")

    with tempfile.TemporaryDirectory() as d, Store(Path(d) / "probe.sqlite") as store:
        env = store.environment_id("probe", runner.environment(), {"warmup": a.warmup, "runs": a.runs})
        sp = SmartPad(runner, store, env, warmup=a.warmup, runs=a.runs)
        probe_cfg: dict[str, list] = {}
        for t in SAMPLED_TYPES:
            cs = sorted((c for c in full if c.layer_type == t), key=lambda c: c.ops)
            idx = np.unique(np.linspace(0, len(cs) - 1, min(a.probe, len(cs))).round().astype(int))
            probe_cfg[t] = [cs[i] for i in idx]
        pair_x, pair_t, lut = [], [], {}
        for k in needed_padding([c for cs in probe_cfg.values() for c in cs]):
            t0 = time.perf_counter()
            lut[k] = sp.measure_padding(k)
            pair_t.append(time.perf_counter() - t0)
            pair_x.append(k[0] * k[1] * k[2])
        est: dict[str, tuple[float, float]] = {}
        for t, cs in probe_cfg.items():
            xs, ts = [], []
            for c in cs:
                t0 = time.perf_counter()
                sp.measure_config(c, lut)
                ts.append(time.perf_counter() - t0)
                xs.append(c.ops)
            est[t] = (_interp_total(xs, ts, [c.ops for c in full if c.layer_type == t]),
                      _interp_total(xs, ts, [c.ops for c in small if c.layer_type == t]))
    pairs_full = _interp_total(pair_x, pair_t, [h * w * c for h, w, c in needed_padding(full)])
    pairs_small = _interp_total(pair_x, pair_t, [h * w * c for h, w, c in needed_padding(small)])
    print(f"{'type':11s} {'default plan':>14s} {'--samples ' + str(a.small):>14s}")
    for t, (f, s) in est.items():
        print(f"{t:11s} {_fmt(f):>14s} {_fmt(s):>14s}")
    print(f"{'padding':11s} {_fmt(pairs_full):>14s} {_fmt(pairs_small):>14s}")
    tot_full = sum(f for f, _ in est.values()) + pairs_full
    tot_small = sum(s for _, s in est.values()) + pairs_small
    print(f"estimated wall time: default plan {_fmt(tot_full)}; --samples {a.small}: {_fmt(tot_small)} "
          f"(+ {t_plan:.0f} s planning)")

    if not a.no_measure:
        with tempfile.TemporaryDirectory() as d, Store(Path(d) / "small.sqlite") as store:
            env = store.environment_id("small", runner.environment(), {"warmup": a.warmup, "runs": a.runs})
            t0 = time.monotonic()
            st = SmartPad(runner, store, env, warmup=a.warmup, runs=a.runs).run(small)
            dt = time.monotonic() - t0
        print(f"measured: --samples {a.small} took {_fmt(dt)} ({st.measured} configurations, "
              f"{st.padding_measured} padding pairs, {st.failed} failed); estimate was {_fmt(tot_small)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
