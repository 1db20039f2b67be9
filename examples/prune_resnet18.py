"""Prune ResNet-18 to a latency budget with Torch-Pruning, guided by the network's latency model.

    python examples/prune_resnet18.py --budget 25 --time

A greedy, latency-aware channel pruner in the spirit of HALP:
1. :class:`estimator.pruning.LatencyModel` reads the exported network once: its channel
   groups (the channels a cut removes together; a ResNet's residual stages are one group
   each) and each layer's latency in the network's context on ``--device``.
2. Each step prunes ``--step`` channels (or up to four times as many, since latency does not
   fall evenly with channels) from the group where they buy the most latency per unit of
   importance lost. The latency saved comes from the model, at the network's current
   widths. The importance is Torch-Pruning's L1 magnitude of the weakest channels, over the
   group's share of the network's importance. Torch-Pruning's dependency graph removes those
   channels from every coupled layer.
3. It stops when the pruned network's calibrated ``--metric`` upper bound at
   ``--confidence`` fits the budget, as ``nas search`` decides feasibility.

The weights are random (nothing is downloaded), so the importances only stand in for a
trained network's; the latency side is what this example shows. ``--time`` times the original
and the pruned network with ONNX Runtime on this machine (1 thread, pinned to ``--affinity``),
in interleaved rounds. That is a fair check only where the profile holds here: run
``bench check --device host-cpu`` first, or make it hold with ``bench calibrate``.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch_pruning as tp

from estimator import zoo
from estimator.predict import Estimator
from estimator.pruning import LatencyModel, estimate_module, module_name


def time_interleaved(models: dict[str, bytes], affinity: str, rounds: int) -> dict[str, list[float]]:
    """name -> each round's median (ms): ``rounds`` randomised interleaved rounds of 5 untimed
    and 20 timed runs per network, with ONNX Runtime (1 thread) pinned to ``affinity``."""
    from bench.runners.base import get_runner  # noqa: PLC0415

    runner = get_runner("onnxruntime", threads=1, affinity=affinity)
    prepared = {k: runner.prepare(v) for k, v in models.items()}
    per: dict[str, list[float]] = {k: [] for k in models}
    rng = random.Random(0)
    for _ in range(rounds):
        order = list(prepared)
        rng.shuffle(order)
        for k in order:
            per[k].append(runner.time(prepared[k], warmup=5, runs=20).median_ms)
    return per


#: how many steps ahead a group's cut is looked at
LOOKAHEAD = 4


def prune_to_budget(model: torch.nn.Module, lm: LatencyModel, shape: tuple[int, ...], budget: float, *,
                    step: int = 8, metric: str = "CM_LV", confidence: float = 0.9) -> tuple[dict[int, int], int]:
    """Prune ``model`` in place (see the module docstring) until ``lm``'s estimate of it fits
    ``budget``; returns the kept channels per group of ``lm`` and the number of steps."""
    dg = tp.DependencyGraph().build_dependency(model, example_inputs=torch.zeros(shape))
    imp = tp.importance.MagnitudeImportance(p=1)
    groups = [g for g in lm.groups if g.prunable]
    modules = {g.index: model.get_submodule(module_name(lm.layers[g.producers[0]].name)) for g in groups}
    state = {g.index: g.channels for g in groups}
    steps = 0
    while lm.estimate(state).interval(metric, confidence)[1] > budget:
        best = None
        for g in groups:
            k = state[g.index]
            conv = modules[g.index]
            scores = imp(dg.get_pruning_group(conv, tp.prune_conv_out_channels, idxs=list(range(conv.out_channels))))
            order = torch.argsort(scores)
            for n in range(step, min(LOOKAHEAD * step, k - step) + 1, step):  # a few steps ahead: latency
                lost = float(scores[order[:n]].sum() / scores.sum())       # is not monotone in channels
                saved = lm.group_ms(g.index, k, state) - lm.group_ms(g.index, k - n, state)
                if saved > 0 and (best is None or saved / max(lost, 1e-9) > best[0]):
                    best = (saved / max(lost, 1e-9), g, order[:n].tolist())
        if best is None:
            print("no group can be pruned further without slowing the network; stopping above the budget")
            break
        _, g, idxs = best
        dg.get_pruning_group(modules[g.index], tp.prune_conv_out_channels, idxs=idxs).prune()
        state[g.index] -= len(idxs)
        steps += 1
    return state, steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="host-cpu", help="device profile (default host-cpu)")
    ap.add_argument("--budget", type=float, default=25.0, help="latency budget in ms (default 25)")
    ap.add_argument("--resolution", type=int, default=224, help="input resolution (default 224)")
    ap.add_argument("--step", type=int, default=8, help="channels pruned per step (default 8)")
    ap.add_argument("--metric", default="CM_LV", choices=("CM_LV", "CM_TV", "CM_O"),
                    help="interval whose upper bound must fit the budget (default CM_LV)")
    ap.add_argument("--confidence", type=float, default=0.9, help="its confidence (default 0.9)")
    ap.add_argument("--time", action="store_true", help="time the original and the pruned network here")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (default 5)")
    ap.add_argument("--affinity", default="1", help="CPU(s) the timing is pinned to (default 1)")
    ap.add_argument("--out", type=Path, help="directory for pruned.onnx and the original's table.csv")
    a = ap.parse_args(argv)

    torch.manual_seed(0)
    model = zoo.build("resnet18", a.resolution).eval()
    shape = (1, 3, a.resolution, a.resolution)
    est = Estimator.from_profile(a.device)
    original = zoo.export_onnx(model, input_shape=shape)
    lm = LatencyModel(est, original, confidence=a.confidence, name="resnet18")
    e0 = lm.estimate()
    lo, hi = e0.interval(a.metric, a.confidence)
    print(f"resnet18@{a.resolution} on {a.device}: {e0.total_ms:.3f} ms, {a.metric} {a.confidence:g} "
          f"[{lo:.3f}, {hi:.3f}] ms; budget {a.budget:g} ms; {sum(g.prunable for g in lm.groups)} channel groups")
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        lm.table(step=a.step).to_csv(a.out / "table.csv")

    t0 = time.perf_counter()
    state, steps = prune_to_budget(model, lm, shape, a.budget, step=a.step, metric=a.metric, confidence=a.confidence)
    groups = [g for g in lm.groups if g.prunable]
    e1 = lm.estimate(state)
    lo1, hi1 = e1.interval(a.metric, a.confidence)
    widths = ", ".join(f"{g.name} {state[g.index]}/{g.channels}" for g in groups if state[g.index] != g.channels)
    print(f"pruned in {steps} steps ({time.perf_counter() - t0:.1f} s): {widths or 'nothing'}")
    print(f"pruned estimate: {e1.total_ms:.3f} ms, {a.metric} {a.confidence:g} [{lo1:.3f}, {hi1:.3f}] ms "
          f"({'fits' if hi1 <= a.budget else 'exceeds'} the {a.budget:g} ms budget)")
    # the pruned torch module, exported and estimated afresh: the same layers, the same numbers
    e2 = estimate_module(model, shape, est, confidence=a.confidence)
    print(f"the pruned module exported and estimated: {e2.total_ms:.3f} ms "
          f"({100 * (e2.total_ms / e1.total_ms - 1):+.2f} % from the latency model's)")
    pruned = zoo.export_onnx(model, input_shape=shape)
    if a.out:
        (a.out / "pruned.onnx").write_bytes(pruned)
        print(f"wrote {a.out / 'pruned.onnx'} and {a.out / 'table.csv'}")
    if a.time:
        per = time_interleaved({"original": original, "pruned": pruned}, a.affinity, a.rounds)
        t = {k: (statistics.median(v), 100 * (max(v) / min(v) - 1)) for k, v in per.items()}
        for k, (ms, spread) in t.items():
            print(f"measured {k}: {ms:.3f} ms (rounds spread {spread:.1f} %)")
        m = t["pruned"][0]
        inside = lo1 <= m <= hi1
        print(f"measured pruned network {m:.3f} ms: {'inside' if inside else 'outside'} the {a.metric} "
              f"{a.confidence:g} interval, {'under' if m <= a.budget else 'over'} the budget; "
              f"estimate error {100 * (e1.total_ms / m - 1):+.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
