"""How well does smart padding recover a layer's own compute time? (a script, not a test)

Over ``--n`` (default 200) conv2d/dwconv2d configurations from the sampling plan, measure
with ONNX Runtime on this CPU:

* T_LUM (midpoint of Eq. 4) from the padded model and the padding lookup table,
* T_single, the single-layer model's end-to-end time (Fig. 5a),
* the reference: ORT's own per-node profile of the LUM's node(s) inside the padded model
  (``OnnxRuntimeRunner.per_layer`` + ``bench.smartpad.lum_profile_ms``),

and print the Pearson correlation of T_LUM and of T_single with the reference (target for
T_LUM: >= 0.975), on raw values and on log values, plus the median ratios. Run it on a
quiet machine: timings taken beside other work are noisy.

With ``--runner vela`` the same is done on Arm Vela's cost model (int8 TFLite, i.MX93
Ethos-U65 defaults; needs the ``tflite`` extra): the reference is then Vela's own
per-layer estimate of the LUM's operators inside the padded model.

    python tests/perf/bench_smartpad_correlation.py            # full: 200 configs
    python tests/perf/bench_smartpad_correlation.py --runner vela --n 100
    python tests/perf/bench_smartpad_correlation.py --n 20 --runs 5   # smoke
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.modelgen import ModelIR, padded_model, to_onnx  # noqa: E402
from bench.runners.onnxruntime_runner import OnnxRuntimeRunner  # noqa: E402
from bench.sampling import limits_for, sample_type  # noqa: E402
from bench.smartpad import SmartPad, lum_profile_ms, render_model  # noqa: E402
from bench.storage import Store  # noqa: E402


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.corrcoef(x, y)[0, 1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200, help="configurations in all (half conv2d, half dwconv2d)")
    ap.add_argument("--max-ops", type=float, default=2e8, help="cap on FLOPs per layer (default 2e8)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--db", default=None, help="keep the measurements in this database (default: temporary)")
    ap.add_argument("--runner", choices=("onnxruntime", "vela"), default="onnxruntime")
    a = ap.parse_args(argv)

    lim = limits_for(a.runner, max_ops=a.max_ops)
    half = a.n // 2
    plan = sample_type("conv2d", a.n - half, seed=a.seed, limits=lim) + sample_type("dwconv2d", half, seed=a.seed,
                                                                                      limits=lim)
    if a.runner == "vela":
        from bench.runners.vela_runner import VelaRunner  # noqa: PLC0415
        from bench.tflite_models import ir_op_of_tensor  # noqa: PLC0415

        runner = VelaRunner()

        def reference_ms(ir: ModelIR) -> float:
            per = runner.per_layer(runner.prepare(render_model(ir, "tflite")))
            lum_ops = set(ir.lum_op_names())
            return sum(ms for t, ms in per.items() if ir_op_of_tensor(t, ir) in lum_ops)
    else:
        runner = OnnxRuntimeRunner(threads=a.threads)

        def reference_ms(ir: ModelIR) -> float:
            return lum_profile_ms(runner.per_layer(runner.prepare(to_onnx(ir)), warmup=a.warmup, runs=a.runs), ir)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        db = Path(a.db) if a.db else Path(d) / "corr.sqlite"
        with Store(db) as store:
            env = store.environment_id("correlation", runner.environment(), {"warmup": a.warmup, "runs": a.runs})
            sp = SmartPad(runner, store, env, warmup=a.warmup, runs=a.runs)
            st = sp.run(plan)
            rows = {r["config_key"]: r for r in store.measurements(env)}
        lum, single, ref, types = [], [], [], []
        for i, c in enumerate(plan):
            r = rows.get(c.key)
            if r is None:
                continue
            ir = padded_model(c.layer_type, c.params)
            ref.append(reference_ms(ir))
            lum.append(r["t_lum_ms"])
            single.append(r["single_median_ms"])
            types.append(c.layer_type)
            if (i + 1) % 50 == 0:
                print(f"  profiled {i + 1}/{len(plan)}", file=sys.stderr)
    dt = time.monotonic() - t0
    lum_a, single_a, ref_a = map(np.asarray, (lum, single, ref))
    print(f"configurations: {len(ref_a)} ({types.count('conv2d')} conv2d, {types.count('dwconv2d')} dwconv2d), "
          f"max ops {a.max_ops:.3g}, warmup {a.warmup}, runs {a.runs}, threads {a.threads}; "
          f"{st.padding_measured} padding pairs; {dt:.0f} s")
    what = "Vela per-layer estimate" if a.runner == "vela" else "ORT per-node profile"
    print(f"runner {a.runner}; reference ({what} of the LUM in the padded model): "
          f"median {np.median(ref_a):.4g} ms, range [{ref_a.min():.3g}, {ref_a.max():.3g}] ms")
    pos = (lum_a > 0) & (ref_a > 0) & (single_a > 0)
    for name, v in (("T_LUM midpoint (smart padding)", lum_a), ("T_single (single-layer model)", single_a)):
        r = pearson(v, ref_a)
        rl = pearson(np.log(v[pos]), np.log(ref_a[pos])) if pos.sum() > 2 else math.nan
        ratio = np.median(v[pos] / ref_a[pos]) if pos.any() else math.nan
        print(f"{name:32s} Pearson r = {r:.4f}   r(log) = {rl:.4f}   median ratio to reference = {ratio:.3f}")
    for t in ("conv2d", "dwconv2d"):
        m = np.array([x == t for x in types])
        if m.sum() > 2:
            print(f"  {t:9s} r(T_LUM) = {pearson(lum_a[m], ref_a[m]):.4f}   "
                  f"r(T_single) = {pearson(single_a[m], ref_a[m]):.4f}   (n={m.sum()})")
    print(f"T_LUM <= 0: {int((lum_a <= 0).sum())}; target r(T_LUM) >= 0.975: "
          f"{'met' if pearson(lum_a, ref_a) >= 0.975 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
