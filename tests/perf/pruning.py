"""Pruned networks, timed and estimated; the latency table's speed and consistency (a script,
not a test: prints figures).

    taskset -c 0 python tests/perf/pruning.py --device host-cpu --affinity 1

1. **Table build time**: ResNet-18 (224) at step 8, from ONNX bytes to the finished table
   (import with the device's fusion rules, channel groups, every entry), the profile's models
   already loaded; best of ``--repeat``.
2. **Table = predict**: the full-width rows of each zoo network's table against
   ``estimator predict``'s total for the same network (both shipped profiles).
3. **Pruned networks**: ResNet-18 and MobileNetV2 (224, random weights) pruned by Torch-Pruning
   (L1 magnitude, uniform ratio, classifier kept) at 0 and each ``--ratios``, once with any
   channel count and once rounded to multiples of 8 (``round_to=8``), plus ResNet-18 pruned
   to ``--budget`` by ``examples/prune_resnet18.py``'s latency-aware pruner. All are timed
   here with ONNX Runtime (1 thread, pinned to ``--affinity``) in ``--rounds`` randomised
   interleaved rounds (the median of the rounds' medians) and estimated on ``--device``
   (calibrated, and the Eq. 7/8 values beside). The noise floor is each network's
   ``|median(odd rounds) / median(even rounds) - 1|``.
4. **Slowdowns in sign**: within each family and rounding, each step to the next ratio: a
   measured slowdown beyond the floor must be predicted as a slowdown.
5. **Transformer widths**: DeiT-Tiny and EfficientFormer-L1 (last stage) cut to
   ``--deit-widths`` and ``--efficientformer-widths`` through their embedding group, and
   MobileViT-XS's three transformer widths cut by each of ``--mobilevit-ratios`` (the modules
   built at each width as ``tests/test_pruning.py`` builds them), timed and estimated as in 3,
   with each width's change from the full width, measured and predicted (what a pruner reads
   from the table). The same for attention's heads: every attention of DeiT-Tiny and
   MobileViT-XS and EfficientFormer-L1's one cut to ``--deit-heads``, ``--mobilevit-heads`` and
   ``--efficientformer-heads`` heads through their heads groups (an empty list skips a
   family). ``--sections 5`` runs this one alone.

These figures hold only where the profile holds: run ``bench check --device host-cpu`` first.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import torch  # noqa: E402
import torch_pruning as tp  # noqa: E402

from estimator import zoo  # noqa: E402
from estimator.predict import Estimator  # noqa: E402
from estimator.pruning import LatencyModel  # noqa: E402
from prune_resnet18 import prune_to_budget, time_interleaved  # noqa: E402

CLASSIFIER = {"resnet18": "fc", "mobilenet_v2": "classifier.1"}
SUM_NETWORKS = ("resnet18", "mobilenet_v2", "resnet50", "mnasnet", "efficientnet_b0", "densenet121", "mobilenet_v3", "shufflenet_v2", "googlenet", "yolov8n", "deit_tiny")


def uniform(name: str, ratio: float, round_to: int | None, res: int) -> torch.nn.Module:
    torch.manual_seed(0)
    m = zoo.build(name, res).eval()
    if ratio > 0:
        x = torch.zeros(1, 3, res, res)
        tp.pruner.MagnitudePruner(m, x, importance=tp.importance.MagnitudeImportance(p=1), pruning_ratio=ratio,
                                  ignored_layers=[m.get_submodule(CLASSIFIER[name])], round_to=round_to).step()
    return m


def transformer_widths(est: Estimator, a: argparse.Namespace) -> None:
    """Section 5 (see the module docstring)."""
    from tests.test_pruning import (MOBILEVIT_BLOCKS, _narrow_deit, _narrow_efficientformer,  # noqa: PLC0415
                                    _narrow_heads, _narrow_mobilevit)

    res, conf, shape = a.resolution, a.confidence, (1, 3, a.resolution, a.resolution)
    nets: dict[str, bytes] = {}
    pruner: dict[str, Any] = {}
    for name, group, narrow, widths in (("deit_tiny", "patch_embed", _narrow_deit, a.deit_widths),
                                        ("efficientformer_l1", "network.13.0", _narrow_efficientformer,
                                         a.efficientformer_widths)):
        if not widths:
            continue
        torch.manual_seed(0)
        lm = LatencyModel(est, zoo.export_onnx(zoo.build(name, res), input_shape=shape), confidence=conf, name=name)
        g = lm.group(group)
        for k in (int(x) for x in widths.split(",")):
            nets[f"{name}@{k}"] = zoo.export_onnx(narrow(zoo.build(name, res), k), input_shape=shape)
            pruner[f"{name}@{k}"] = lm.estimate({g.index: k})
    name = "mobilevit_xs"
    lm = LatencyModel(est, zoo.export_onnx(zoo.build(name, res), input_shape=shape), confidence=conf, name=name)
    for r in (float(x) for x in a.mobilevit_ratios.split(",") if x):
        model = zoo.build(name, res)
        kept = {}
        for blk in MOBILEVIT_BLOCKS:
            g = lm.group(f"{blk}.local.1")
            kept[g.index] = g.channels - int(g.channels * r)
            model = _narrow_mobilevit(model, kept[g.index], (blk,))
        nets[f"{name}@{r:g}"] = zoo.export_onnx(model, input_shape=shape)
        pruner[f"{name}@{r:g}"] = lm.estimate(kept)
    for name, heads in (("deit_tiny", a.deit_heads), ("efficientformer_l1", a.efficientformer_heads),
                        ("mobilevit_xs", a.mobilevit_heads)):
        if not heads:
            continue
        lm = LatencyModel(est, zoo.export_onnx(zoo.build(name, res), input_shape=shape), confidence=conf, name=name)
        paths = [p for p, m in zoo.build(name, res).named_modules() if hasattr(m, "qkv") and hasattr(m, "heads")]
        for k in (int(x) for x in heads.split(",")):
            model = zoo.build(name, res)
            for path in paths:
                model = _narrow_heads(model, path, k)
            nets[f"{name} heads@{k}"] = zoo.export_onnx(model, input_shape=shape)
            pruner[f"{name} heads@{k}"] = lm.estimate({lm.group(f"{path}.qkv").index: k for path in paths})
    print(f"\ntiming {len(nets)} transformer widths in {a.rounds} interleaved rounds on CPU {a.affinity}", file=sys.stderr)
    per = time_interleaved(nets, a.affinity, a.rounds)
    print(f"\ntransformer widths on {a.device} (measured: ONNX Runtime, 1 thread, CPU {a.affinity}, "
          f"{a.rounds} rounds; change: from the first width)")
    print(f"{'network':28s} {'measured':>9s} {'floor%':>7s} {'estimate':>9s} {'err%':>7s} {'CM_LV 90':>20s} {'in':>3s} "
          f"{'uncal err%':>10s} {'change meas':>11s} {'pred':>7s} {'table=module':>12s}")
    rows = []
    for name in ("deit_tiny", "efficientformer_l1", "mobilevit_xs", "deit_tiny heads", "efficientformer_l1 heads",
                 "mobilevit_xs heads"):
        first = None
        for k in [key for key in nets if key.startswith(name + "@")]:
            v = per[k]
            meas = statistics.median(v)
            floor = abs(statistics.median(v[0::2]) / statistics.median(v[1::2]) - 1) * 100
            e = est.estimate_network(nets[k], conf, per_layer=False)
            lo, hi = e.interval("CM_LV", conf)
            unc = (e.uncalibrated or {"total_ms": e.total_ms})["total_ms"]
            first = first or (meas, e.total_ms)
            same = abs(pruner[k].total_ms / e.total_ms - 1)
            rows.append((meas, floor, e.total_ms, lo, hi, unc))
            print(f"{k:28s} {meas:9.3f} {floor:7.2f} {e.total_ms:9.3f} {100 * (e.total_ms / meas - 1):+7.1f} "
                  f"[{lo:8.3f}, {hi:8.3f}] {'y' if lo <= meas <= hi else 'N':>3s} {100 * (unc / meas - 1):+10.1f} "
                  f"{100 * (meas / first[0] - 1):+10.1f}% {100 * (e.total_ms / first[1] - 1):+6.1f}% {same:12.1e}")
    n = len(rows)
    print(f"  {n} networks: noise floor mean {statistics.mean(r[1] for r in rows):.2f} %; calibrated mean |error| "
          f"{statistics.mean(abs(r[2] / r[0] - 1) for r in rows) * 100:.2f} %, CM_LV {conf:g} covers "
          f"{sum(r[3] <= r[0] <= r[4] for r in rows)}/{n} at mean width "
          f"{statistics.mean((r[4] - r[3]) / r[2] for r in rows) * 100:.0f} %; uncalibrated mean |error| "
          f"{statistics.mean(abs(r[5] / r[0] - 1) for r in rows) * 100:.2f} %")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="host-cpu")
    ap.add_argument("--profiles", default=None, metavar="DIR", help="profiles directory (default: the shipped ones)")
    ap.add_argument("--ratios", default="0.3,0.5,0.7", help="uniform pruning ratios (default 0.3,0.5,0.7)")
    ap.add_argument("--budget", type=float, default=15.0, help="ms budget of the latency-aware pruner (default 15)")
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=8, help="interleaved timing rounds (default 8)")
    ap.add_argument("--affinity", default="1", help="CPU(s) the timing is pinned to (default 1)")
    ap.add_argument("--repeat", type=int, default=3, help="table builds to take the best of (default 3)")
    ap.add_argument("--confidence", type=float, default=0.9)
    ap.add_argument("--deit-widths", default="192,160,128,96,64", help="DeiT-Tiny embedding widths of section 5")
    ap.add_argument("--efficientformer-widths", default="448,352,256,160",
                    help="EfficientFormer-L1 last-stage widths of section 5")
    ap.add_argument("--mobilevit-ratios", default="0,0.25,0.5",
                    help="MobileViT-XS transformer width pruning ratios of section 5")
    ap.add_argument("--deit-heads", default="3,2,1", help="heads of every DeiT-Tiny attention in section 5")
    ap.add_argument("--efficientformer-heads", default="8,6,4,2",
                    help="heads of EfficientFormer-L1's attention in section 5")
    ap.add_argument("--mobilevit-heads", default="4,3,2", help="heads of every MobileViT-XS attention in section 5")
    ap.add_argument("--sections", default="1,2,3,4,5", help="sections to run (default all: 1,2,3,4,5)")
    a = ap.parse_args(argv)
    res, conf = a.resolution, a.confidence
    sections = {int(x) for x in a.sections.split(",")}
    est = Estimator.from_profile(a.device, root=a.profiles)
    est.warm_up()
    if 5 in sections:
        transformer_widths(est, a)
    if not sections & {1, 2, 3, 4}:
        return 0

    # 1. table build time
    data = zoo.export_onnx("resnet18", 224)
    times, rows = [], 0
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        table = LatencyModel(est, data, confidence=conf, name="resnet18").table(step=8)
        times.append(time.perf_counter() - t0)
        rows = sum(len(v) for v in table.entries.values())
    print(f"table build, ResNet-18 (224) at step 8 on {a.device}: {min(times):.2f} s best of {a.repeat} "
          f"({', '.join(f'{t:.2f}' for t in times)} s); {rows} rows over {sum(g.prunable for g in table.model.groups)} "
          f"channel groups")

    # 2. table = predict
    print("\ntable full-width rows vs estimator predict:")
    for dev in dict.fromkeys([a.device, "imx93"]):
        e = est if dev == a.device else Estimator.from_profile(dev)
        for name in SUM_NETWORKS:
            d = zoo.export_onnx(name)
            t = LatencyModel(e, d, confidence=conf, name=name).table(step=64)
            p = e.estimate_network(d, conf, per_layer=False).total_ms
            print(f"  {dev:10s} {name:16s} table {t.total_ms:9.4f} ms  predict {p:9.4f} ms  "
                  f"{100 * (t.total_ms / p - 1):+.4f} %")

    # 3. pruned networks
    ratios = [float(r) for r in a.ratios.split(",")]
    nets: dict[str, tuple[str, int | None, float, bytes]] = {}
    for name in CLASSIFIER:
        for rt in (None, 8):
            for r in [0.0, *ratios]:
                if r == 0 and rt is not None:
                    continue
                label = f"{name}{'/r8' if rt else ''}@{r:g}"
                nets[label] = (name, rt, r, zoo.export_onnx(uniform(name, r, rt, res), input_shape=(1, 3, res, res)))
    torch.manual_seed(0)
    m = zoo.build("resnet18", res).eval()
    lm = LatencyModel(est, zoo.export_onnx(m, input_shape=(1, 3, res, res)), confidence=conf, name="resnet18")
    state, steps = prune_to_budget(m, lm, (1, 3, res, res), a.budget, confidence=conf)
    nets[f"resnet18/budget{a.budget:g}"] = ("resnet18", None, -1.0, zoo.export_onnx(m, input_shape=(1, 3, res, res)))
    print(f"\nlatency-aware pruner: {steps} steps to a {a.budget:g} ms budget; timing {len(nets)} networks in "
          f"{a.rounds} interleaved rounds on CPU {a.affinity}", file=sys.stderr)
    per = time_interleaved({k: v[3] for k, v in nets.items()}, a.affinity, a.rounds)
    print(f"\npruned networks on {a.device} (measured: ONNX Runtime, 1 thread, CPU {a.affinity}, {a.rounds} rounds)")
    print(f"{'network':24s} {'measured':>9s} {'floor%':>7s} {'estimate':>9s} {'err%':>7s} {'CM_LV 90':>20s} "
          f"{'in':>3s} {'uncal':>8s} {'err%':>7s} {'in':>3s}")
    res_rows = {}
    for k, (name, rt, r, d) in nets.items():
        v = per[k]
        meas = statistics.median(v)
        floor = abs(statistics.median(v[0::2]) / statistics.median(v[1::2]) - 1) * 100
        e = est.estimate_network(d, conf, per_layer=False)
        lo, hi = e.interval("CM_LV", conf)
        unc = e.uncalibrated or {"total_ms": e.total_ms, "intervals": e.intervals}
        ulo, uhi = unc["intervals"]["CM_LV"][conf]
        res_rows[k] = dict(meas=meas, floor=floor, est=e.total_ms, lo=lo, hi=hi, unc=unc["total_ms"], ulo=ulo,
                           uhi=uhi)
        print(f"{k:24s} {meas:9.3f} {floor:7.2f} {e.total_ms:9.3f} {100 * (e.total_ms / meas - 1):+7.1f} "
              f"[{lo:8.3f}, {hi:8.3f}] {'y' if lo <= meas <= hi else 'N':>3s} {unc['total_ms']:8.3f} "
              f"{100 * (unc['total_ms'] / meas - 1):+7.1f} {'y' if ulo <= meas <= uhi else 'N':>3s}")
    rs = list(res_rows.values())
    n = len(rs)
    floor_mean = statistics.mean(r["floor"] for r in rs)
    print(f"\nsummary over {n} networks: noise floor mean {floor_mean:.2f} % (max {max(r['floor'] for r in rs):.2f} %)")
    print(f"  calibrated:   mean |error| {statistics.mean(abs(r['est'] / r['meas'] - 1) for r in rs) * 100:.2f} %, "
          f"CM_LV {conf:g} covers {sum(r['lo'] <= r['meas'] <= r['hi'] for r in rs)}/{n}, mean width "
          f"{statistics.mean((r['hi'] - r['lo']) / r['est'] for r in rs) * 100:.0f} %")
    print(f"  uncalibrated: mean |error| {statistics.mean(abs(r['unc'] / r['meas'] - 1) for r in rs) * 100:.2f} %, "
          f"CM_LV {conf:g} covers {sum(r['ulo'] <= r['meas'] <= r['uhi'] for r in rs)}/{n}, mean width "
          f"{statistics.mean((r['uhi'] - r['ulo']) / r['unc'] for r in rs) * 100:.0f} %")
    b = res_rows[f"resnet18/budget{a.budget:g}"]
    print(f"  latency-aware pruner to {a.budget:g} ms: measured {b['meas']:.3f} ms, CM_LV [{b['lo']:.3f}, {b['hi']:.3f}]: "
          f"{'inside' if b['lo'] <= b['meas'] <= b['hi'] else 'OUTSIDE'} the interval, "
          f"{'under' if b['meas'] <= a.budget else 'OVER'} the budget")

    # 4. slowdowns in sign
    print("\nsteps between ratios (measured change, predicted change; a measured slowdown beyond the pair's floor "
          "must be predicted):")
    missed = slow = 0
    for name in CLASSIFIER:
        for rt in (None, 8):
            chain = [f"{name}@0"] + [f"{name}{'/r8' if rt else ''}@{r:g}" for r in ratios]
            for x, y in zip(chain, chain[1:]):
                mx, my = res_rows[x], res_rows[y]
                dm = my["meas"] / mx["meas"] - 1
                dp = my["est"] / mx["est"] - 1
                fl = (mx["floor"] + my["floor"]) / 100
                tag = ""
                if dm > fl:
                    slow += 1
                    tag = "slowdown, predicted" if dp > 0 else "slowdown, MISSED"
                    missed += dp <= 0
                print(f"  {x:20s} -> {y:22s} measured {100 * dm:+6.1f} %  predicted {100 * dp:+6.1f} %  {tag}")
    print(f"  measured slowdowns beyond the floor: {slow}, predicted in sign: {slow - missed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
