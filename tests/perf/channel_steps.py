"""One-channel steps of pruned layers: which are real, which are noise (a script, not a
test: prints figures).

For a few layers typical of pruned CNNs, every channel count in a window around multiples
of 8 and 16 is timed on this machine, and every one-channel step ``c -> c-1`` is classified
as measured

* ``inversion``: slower with fewer channels, beyond the noise floor;
* ``decrease``: faster with fewer channels, beyond the noise floor;
* ``noise``: within the floor, or the two halves of the rounds disagree on its sign;

beside what a profile (``--device``, default ``host-cpu``) predicts for the same step
(:meth:`estimator.predict.Estimator.estimate_layers`). A predicted inversion is a step the
profile says gets slower with fewer channels, by any amount: what a pruning tool reading
"latency saved per channel" sees as a negative saving.

What is timed. The smart-padded layer (Fig. 5c: 1x1 conv into the layer, the layer, 1x1
conv out of it) and its padding-only pairs, built by :mod:`bench.modelgen` and combined by
Eq. 4 (:func:`bench.smartpad.t_b_from_lut`, :func:`bench.smartpad.lum_interval`, midpoint)
within each round: ``T_LUM``, the quantity a profile's layer rows hold and its forests are
trained on, and the layer as a network runs it (its input written by a convolution in ONNX
Runtime's blocked layout). Steps are classified on ``T_LUM``. Two more columns, each timed in
the same rounds (``--no-kernel``, ``--no-single`` leave them out):

* ``kernel``: ONNX Runtime's own per-node time of the layer inside the padded model
  (``OnnxRuntimeRunner.per_layer``, :func:`bench.smartpad.lum_profile_ms`). Its steps are
  classified too: a step in ``T_LUM`` that is near zero here comes from the padding convs
  around the layer (in a network, from its neighbours), not from the layer's kernel.
* ``single``: the single-layer model (Fig. 5a). Not what is classified: its time includes
  the reorders from and to the graph's plain layout, which scale with the channels and which
  a network does not have between two blocked convolutions (smart padding correlates 0.978
  with ONNX Runtime's per-node time, the single-layer model 0.875, ``docs/results.md``).

How. ONNX Runtime, 1 intra-op thread, pinned (``--affinity``, default CPU 1). Per layer,
every model is prepared once, then timed in ``--rounds`` randomised interleaved rounds
(every model of the layer once per round, in a new order each round; ``--warmup`` untimed
and ``--runs`` timed inferences, the median kept), so a slow spell of a shared VM hits all
channel counts alike. A channel count's time is the median over rounds of its per-round
Eq. 4 midpoint; its spread is 1.4826 MAD of those, in %. A step is the median over rounds of
the per-round difference ``T(c-1) - T(c)`` (paired within a round).

Noise floor: disjoint rounds of the same configuration. The rounds are split into even and
odd ones; for each channel count, ``|median(even) - median(odd)| / median``. The layer's
floor is the 90th percentile of that over its channel counts (the median is printed too). A
step is real when ``|step| / T(c)`` exceeds the floor and the step taken over the even
rounds alone and over the odd rounds alone have the same sign; otherwise it is noise. On
made-up rounds (33 channel counts, 20 rounds, a drift common to each round of 5 %, noise per
model of 2-5 %, normal or Student-t with 3 degrees of freedom) a step with no effect is called
real in 0.2-1.2 % of cases. A step smaller than the floor is noise here even when it exists:
the one-channel change of FLOPs (0.2-2.5 % in the default windows) is below it.

Monotone tables. For each layer it also prints what a table made non-increasing as channels
fall would hide, and how two constructions of it fit the measured curve (shape error: mean
|x - measured| / measured after scaling x by the layer's median measured/predicted ratio, so
that the machine's speed today does not count): the running minimum from the top,
``entry(c) = min over c' >= c of p(c')``, and isotonic regression (least squares,
non-decreasing in c; scikit-learn's ``IsotonicRegression``).

    taskset -c 1 python tests/perf/channel_steps.py       # 6 layers, 20 rounds: about 6 min
    taskset -c 1 python tests/perf/channel_steps.py --layers conv3x3_c_out --rounds 6   # quick look

Run it with nothing else on the pinned CPU. Figures: ``docs/results.md``, "One-channel steps".
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.modelgen import padded_model, padding_keys, padding_model, single_layer_model  # noqa: E402
from bench.runners.base import Timing  # noqa: E402
from bench.runners.onnxruntime_runner import OnnxRuntimeRunner  # noqa: E402
from bench.smartpad import lum_interval, lum_profile_ms, render_model, t_b_from_lut  # noqa: E402
from estimator.layers import bench_params  # noqa: E402


@dataclass(frozen=True)
class Sweep:
    """A layer whose channel count ``key`` takes every value in ``values``."""

    name: str
    label: str
    layer_type: str
    base: dict[str, Any]
    key: str
    values: tuple[int, ...]

    def params(self, c: int) -> dict[str, Any]:
        return bench_params(self.layer_type, {**self.base, self.key: c})


#: The default layers: ResNet-18's stage-1 3x3 conv pruned on its output; its stage-2 3x3
#: conv pruned on its input (the previous layer's output); MobileNetV2's expansion 1x1 convs
#: at 28x28 (32 -> 6 x 32; 0.07 ms, the noisiest) and at
#: 56x56 (24 -> 6 x 24), and the depthwise conv after the latter; a hidden fully connected
#: layer (one row, as a classifier's). Each window spans at least two multiples of 16.
SWEEPS = (
    Sweep("conv3x3_c_out", "conv 3x3 56x56 64->c_out", "conv2d", dict(h=56, w=56, c_in=64, k_h=3, k_w=3), "c_out",
          tuple(range(40, 73))),
    Sweep("conv3x3_c_in", "conv 3x3 28x28 c_in->128", "conv2d", dict(h=28, w=28, c_out=128, k_h=3, k_w=3), "c_in",
          tuple(range(104, 137))),
    Sweep("conv1x1_28", "conv 1x1 28x28 32->c_out", "conv2d", dict(h=28, w=28, c_in=32, k_h=1, k_w=1), "c_out",
          tuple(range(176, 209))),
    Sweep("conv1x1_56", "conv 1x1 56x56 24->c_out", "conv2d", dict(h=56, w=56, c_in=24, k_h=1, k_w=1), "c_out",
          tuple(range(128, 161))),
    Sweep("dwconv3x3_c", "dwconv 3x3 56x56 c", "dwconv2d", dict(h=56, w=56, k_h=3, k_w=3), "c",
          tuple(range(128, 161))),
    Sweep("fc_c_out", "fc 2048->c_out", "fc", dict(c_in=2048), "c_out", tuple(range(496, 529))),
)

CLASSES = ("inversion", "decrease", "noise")


@dataclass
class Series:
    """Per-round times (ms) of one quantity for every channel count of a sweep."""

    rounds: dict[int, list[float]] = field(default_factory=dict)

    def median(self, c: int) -> float:
        return statistics.median(self.rounds[c])

    def spread_pct(self, c: int) -> float:
        xs, m = self.rounds[c], self.median(c)
        return 100.0 * 1.4826 * statistics.median(abs(x - m) for x in xs) / m if m > 0 else math.nan

    def half_gap(self, c: int) -> float:
        """|median of the even rounds - median of the odd rounds| / median."""
        xs = self.rounds[c]
        m = self.median(c)
        return abs(statistics.median(xs[0::2]) - statistics.median(xs[1::2])) / m if m > 0 else math.nan

    def floor(self, q: float = 0.9) -> tuple[float, float]:
        """(median, ``q`` quantile) of the half gaps over the channel counts."""
        gaps = [self.half_gap(c) for c in self.rounds]
        gaps = [g for g in gaps if not math.isnan(g)]
        return float(np.median(gaps)), float(np.quantile(gaps, q))

    def step(self, c: int) -> tuple[float, float, float]:
        """Step ``c -> c-1`` (ms, positive: slower with fewer channels): the median over
        rounds of the paired difference, and the same over the even and the odd rounds."""
        d = [a - b for a, b in zip(self.rounds[c - 1], self.rounds[c])]
        return statistics.median(d), statistics.median(d[0::2]), statistics.median(d[1::2])

    def classify(self, c: int, floor: float) -> str:
        d, d_even, d_odd = self.step(c)
        m = self.median(c)
        if m <= 0:
            return "noise"
        if d / m > floor and d_even > 0 and d_odd > 0:
            return "inversion"
        if d / m < -floor and d_even < 0 and d_odd < 0:
            return "decrease"
        return "noise"


def time_sweep(runner: OnnxRuntimeRunner, sw: Sweep, *, rounds: int, runs: int, warmup: int, seed: int,
               single: bool, kernel: bool, progress: bool) -> dict[str, Series]:
    """Prepare every model of the sweep once, time them in randomised interleaved rounds,
    return the per-round series: ``lum`` (Eq. 4 midpoint), and ``single``/``kernel`` when asked."""
    irs: dict[tuple[Any, ...], Any] = {}
    for c in sw.values:
        p = sw.params(c)
        irs[("padded", c)] = padded_model(sw.layer_type, p)
        for k in padding_keys(sw.layer_type, p).all():
            irs.setdefault(("pair", k), padding_model(*k))
        if single:
            irs[("single", c)] = single_layer_model(sw.layer_type, p)
    prepared = {key: runner.prepare(render_model(ir, "onnx")) for key, ir in irs.items()}
    jobs: list[tuple[str, Any]] = [("time", key) for key in prepared]
    if kernel:
        jobs += [("kernel", c) for c in sw.values]
    timings: dict[tuple[Any, ...], list[Timing]] = {key: [] for key in prepared}
    kern = Series({c: [] for c in sw.values})
    rng = random.Random(f"{seed}:{sw.name}")
    t0 = time.monotonic()
    for r in range(rounds):
        rng.shuffle(jobs)
        for what, key in jobs:
            if what == "time":
                timings[key].append(runner.time(prepared[key], warmup=warmup, runs=runs))
            else:
                per = runner.per_layer(prepared[("padded", key)], warmup=warmup, runs=runs)
                kern.rounds[key].append(lum_profile_ms(per, irs[("padded", key)]))
        if progress:
            print(f"  {sw.name}: round {r + 1}/{rounds} ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    prepared.clear()
    lum = Series({c: [] for c in sw.values})
    for r in range(rounds):
        lut = {k[1]: ts[r] for k, ts in timings.items() if k[0] == "pair"}  # this round's padding pairs
        for c in sw.values:
            t_b1, t_b2, _, _ = t_b_from_lut(lut, sw.layer_type, sw.params(c))
            lum.rounds[c].append(lum_interval(timings[("padded", c)][r].median_ms, t_b1, t_b2).mid)
    out = {"lum": lum}
    if single:
        out["single"] = Series({c: [t.median_ms for t in timings[("single", c)]] for c in sw.values})
    if kernel:
        out["kernel"] = kern
    return out


def running_min_from_top(xs: Sequence[float]) -> list[float]:
    """``out[i] = min(xs[i:])``: non-decreasing in the channel count, never above ``xs``."""
    out, m = [0.0] * len(xs), math.inf
    for i in range(len(xs) - 1, -1, -1):
        m = min(m, xs[i])
        out[i] = m
    return out


def isotonic(cs: Sequence[int], xs: Sequence[float]) -> list[float]:
    from sklearn.isotonic import IsotonicRegression  # noqa: PLC0415

    return [float(v) for v in IsotonicRegression(increasing=True).fit_transform(np.asarray(cs, float), xs)]


def shape_error(x: Sequence[float], m: Sequence[float]) -> float:
    """Mean |s x - m| / m with s the median of m / x (a scale-free error, %)."""
    xa, ma = np.asarray(x, float), np.asarray(m, float)
    s = float(np.median(ma / xa))
    return 100.0 * float(np.mean(np.abs(s * xa - ma) / ma))


def mark(c: int) -> str:
    return "16" if c % 16 == 0 else "8" if c % 8 == 0 else ""


def report(sw: Sweep, series: dict[str, Series], pred: dict[int, float]) -> dict[str, Any]:
    """Print the layer's table and return its figures."""
    lum = series["lum"]
    floor_med, floor = lum.floor()
    floors = {name: s.floor() for name, s in series.items()}
    cs = list(sw.values)
    print(f"\n{sw.label}  ({sw.layer_type}, {sw.key} {cs[0]}..{cs[-1]}; noise floor: half-gap median "
          f"{100 * floor_med:.2f} %, 90th pct {100 * floor:.2f} %"
          + "".join(f"; {n} {100 * f[1]:.2f} %" for n, f in floors.items() if n != "lum") + ")")
    head = f"{sw.key:>6} {'x8/16':>5} {'T_LUM ms':>9} {'+-%':>5}"
    if "kernel" in series:
        head += f" {'kernel ms':>9}"
    if "single" in series:
        head += f" {'single ms':>9}"
    head += f" {'pred ms':>8} | {'step c->c-1: meas %':>19} {'class':>9} {'pred %':>7}"
    if "kernel" in series:
        head += f" {'kernel':>9}"
    print(head)
    steps = []
    for c in cs:
        m = lum.median(c)
        line = f"{c:>6} {mark(c):>5} {m:>9.4f} {lum.spread_pct(c):>5.1f}"
        if "kernel" in series:
            line += f" {series['kernel'].median(c):>9.4f}"
        if "single" in series:
            line += f" {series['single'].median(c):>9.4f}"
        line += f" {pred[c]:>8.4f} |"
        if c - 1 in lum.rounds:
            d = lum.step(c)[0]
            cls = lum.classify(c, floor)
            dp = pred[c - 1] - pred[c]
            row = {"c": c, "meas_pct": 100 * d / m, "class": cls, "pred_pct": 100 * dp / pred[c],
                   "pred_inversion": dp > 0, "mult": mark(c) or mark(c - 1)}
            line += f" {row['meas_pct']:>+19.2f} {cls:>9} {row['pred_pct']:>+7.2f}"
            if "kernel" in series:
                k = series["kernel"]
                row["kernel_class"] = k.classify(c, floors["kernel"][1])
                row["kernel_pct"] = 100 * k.step(c)[0] / k.median(c)
                line += f" {row['kernel_class']:>9}"
            steps.append(row)
        print(line)
    meas = [lum.median(c) for c in cs]
    p = [pred[c] for c in cs]
    hidden = [100 * (a - b) / a for a, b in zip(meas, running_min_from_top(meas))]
    fig = {
        "layer": sw.label, "name": sw.name, "floor_median_pct": 100 * floor_med, "floor_pct": 100 * floor,
        "floors_pct": {n: 100 * f[1] for n, f in floors.items()},
        "median_spread_pct": float(np.median([lum.spread_pct(c) for c in cs])),
        "steps": steps,
        "measured_ms": {c: lum.median(c) for c in cs}, "predicted_ms": {c: pred[c] for c in cs},
        "hidden_max_pct": max(hidden), "hidden_mean_pct": float(np.mean(hidden)),
        "shape_error_pct": {"raw": shape_error(p, meas), "running_min": shape_error(running_min_from_top(p), meas),
                            "isotonic": shape_error(isotonic(cs, p), meas),
                            "measured_running_min": shape_error(running_min_from_top(meas), meas)},
    }
    se = fig["shape_error_pct"]
    n = {k: sum(s["class"] == k for s in steps) for k in CLASSES}
    print(f"steps: {n['inversion']} real inversions, {n['decrease']} real decreases, {n['noise']} noise; "
          f"predicted inversions {sum(s['pred_inversion'] for s in steps)}")
    print(f"monotone: a non-increasing table of the measured times would sit up to {fig['hidden_max_pct']:.1f} % "
          f"(mean {fig['hidden_mean_pct']:.1f} %) below them; shape error vs measured: prediction "
          f"{se['raw']:.1f} %, running min {se['running_min']:.1f} %, isotonic {se['isotonic']:.1f} %")
    return fig


def summary(figs: list[dict[str, Any]]) -> dict[str, Any]:
    steps = [s for f in figs for s in f["steps"]]
    n = {k: sum(s["class"] == k for s in steps) for k in CLASSES}
    pred_inv = [s for s in steps if s["pred_inversion"]]
    real_inv = [s for s in steps if s["class"] == "inversion"]
    hit = [s for s in pred_inv if s["class"] == "inversion"]
    out = {
        "steps": len(steps), "classes": n,
        "floor_pct": {f["name"]: round(f["floor_pct"], 2) for f in figs},
        "predicted_inversions": len(pred_inv),
        "predicted_inversions_by_measured_class": {k: sum(s["class"] == k for s in pred_inv) for k in CLASSES},
        "precision": len(hit) / len(pred_inv) if pred_inv else math.nan,
        "recall": len(hit) / len(real_inv) if real_inv else math.nan,
        "missed_real_inversions": [(f["name"], s["c"], round(s["meas_pct"], 1), round(s["pred_pct"], 1))
                                   for f in figs for s in f["steps"]
                                   if s["class"] == "inversion" and not s["pred_inversion"]],
    }
    print("\nSummary over", len(figs), "layers,", len(steps), "one-channel steps")
    print("  noise floor (90th pct of half-gaps): " + ", ".join(f"{f['name']} {f['floor_pct']:.2f} %" for f in figs)
          + "; median per-round spread " + ", ".join(f"{f['median_spread_pct']:.1f} %" for f in figs))
    print(f"  measured: {n['inversion']} real inversions, {n['decrease']} real decreases, {n['noise']} noise")
    if any("kernel_class" in s for s in steps):
        nk = {k: sum(s.get("kernel_class") == k for s in steps) for k in CLASSES}
        agree = sum(s.get("kernel_class") == s["class"] for s in steps if s["class"] != "noise")
        real = sum(s["class"] != "noise" for s in steps)
        out["kernel_classes"] = nk
        print(f"  kernel time (ORT per-node): {nk['inversion']} real inversions, {nk['decrease']} real decreases, "
              f"{nk['noise']} noise; the same class as T_LUM for {agree} of T_LUM's {real} real steps")
        k_inv = [s for s in steps if s.get("kernel_class") == "inversion"]
        k_hit = [s for s in pred_inv if s.get("kernel_class") == "inversion"]
        out["kernel_precision"] = len(k_hit) / len(pred_inv) if pred_inv else math.nan
        out["kernel_recall"] = len(k_hit) / len(k_inv) if k_inv else math.nan
        print(f"  against the kernel time's real inversions: predicted-inversion precision "
              f"{out['kernel_precision']:.2f}, recall {out['kernel_recall']:.2f}")
        pad = [(f["name"], s) for f in figs for s in f["steps"] if s["class"] != "noise" and s["kernel_class"] == "noise"]
        if pad:
            print("  real in T_LUM, noise in the kernel time (a kernel step near 0 %: the padding around the layer; "
                  "layer, c -> c-1, T_LUM %, kernel %): " + "; ".join(f"{n} {s['c']} {s['meas_pct']:+.1f} {s['kernel_pct']:+.1f}"
                                                    for n, s in pad))
    pi = out["predicted_inversions_by_measured_class"]
    print(f"  predicted inversions: {len(pred_inv)}: {pi['inversion']} real inversions, {pi['noise']} noise, "
          f"{pi['decrease']} real decreases (wrong sign)")
    print(f"  predicted-inversion precision {out['precision']:.2f}, recall {out['recall']:.2f} "
          f"(against measured real inversions)")
    real = [s for s in steps if s["class"] == "inversion"]
    if real:
        print("  real inversions (layer, c -> c-1, measured %, predicted %): "
              + "; ".join(f"{f['name']} {s['c']} {s['meas_pct']:+.1f} {s['pred_pct']:+.1f}"
                          for f in figs for s in f["steps"] if s["class"] == "inversion"))
    big = [(f["name"], s) for f in figs for s in f["steps"] if s["class"] == "decrease" and s["meas_pct"] <= -5]
    if big:
        print("  real decreases of 5 % or more (layer, c -> c-1, measured %, predicted %): "
              + "; ".join(f"{n} {s['c']} {s['meas_pct']:+.1f} {s['pred_pct']:+.1f}" for n, s in big))
    print("  monotone tables: " + "; ".join(
        f"{f['name']} hides up to {f['hidden_max_pct']:.1f} %, shape error pred/runmin/isotonic "
        f"{f['shape_error_pct']['raw']:.1f}/{f['shape_error_pct']['running_min']:.1f}/"
        f"{f['shape_error_pct']['isotonic']:.1f} %" for f in figs))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="host-cpu", help="profile whose predictions are compared (default host-cpu)")
    ap.add_argument("--layers", default=None,
                    help=f"comma-separated layers (default all: {', '.join(s.name for s in SWEEPS)})")
    ap.add_argument("--rounds", type=int, default=20, help="randomised interleaved rounds per layer (default 20)")
    ap.add_argument("--runs", type=int, default=20, help="timed inferences per model and round (default 20)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed inferences per model and round (default 5)")
    ap.add_argument("--affinity", default="1", help="CPU ids to pin to (default 1; '' for none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-single", dest="single", action="store_false", help="do not time the single-layer models")
    ap.add_argument("--no-kernel", dest="kernel", action="store_false",
                    help="do not read ONNX Runtime's per-node time of the layer inside the padded model")
    ap.add_argument("--json", default=None, metavar="FILE", help="write every figure as JSON")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    if a.rounds < 4:
        ap.error("--rounds must be at least 4 (the noise floor splits them in two)")
    sweeps = list(SWEEPS)
    if a.layers:
        names = [n.strip() for n in a.layers.split(",") if n.strip()]
        bad = [n for n in names if n not in {s.name for s in SWEEPS}]
        if bad:
            ap.error(f"unknown layer(s) {', '.join(bad)}; known: {', '.join(s.name for s in SWEEPS)}")
        sweeps = [s for s in SWEEPS if s.name in names]

    from estimator.predict import Estimator, make_layer  # noqa: PLC0415

    est = Estimator.from_profile(a.device)
    preds = {}
    for sw in sweeps:
        rows = est.estimate_layers([make_layer(sw.layer_type, sw.params(c)) for c in sw.values])
        preds[sw.name] = {c: r.prediction_ms for c, r in zip(sw.values, rows)}

    runner = OnnxRuntimeRunner(threads=1, affinity=a.affinity or None)
    env = runner.environment()
    print(f"channel steps on {env['host']['cpu_model']}, onnxruntime {env['versions']['onnxruntime']}, 1 thread, "
          f"affinity {env['affinity']}; {a.rounds} rounds x ({a.warmup} + {a.runs} runs); "
          f"predictions: profile {a.device}")
    t0 = time.monotonic()
    figs = []
    with runner:
        for sw in sweeps:
            series = time_sweep(runner, sw, rounds=a.rounds, runs=a.runs, warmup=a.warmup, seed=a.seed,
                                single=a.single, kernel=a.kernel, progress=not a.no_progress)
            figs.append(report(sw, series, preds[sw.name]))
    out = summary(figs)
    print(f"  wall time {time.monotonic() - t0:.0f} s")
    if a.json:
        Path(a.json).write_text(json.dumps({"layers": figs, "summary": out, "environment": env,
                                            "settings": vars(a)}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
