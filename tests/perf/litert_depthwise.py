"""Depthwise convolutions on LiteRT float32: the cost of each kernel size, and whether a large-kernel
depthwise convolution costs more inside a network than between padding convolutions (a script, not
a test: prints figures, asserts nothing).

1. **Kernel sizes.** One depthwise convolution (``--channels`` x 28 x 28, stride 1) for kernels
   3, 5, 7 and 9, timed with LiteRT's default XNNPACK delegate and without it (TFLite's built-in
   kernels), in interleaved rounds.
2. **In a chain or padded.** Four inverted residuals (1x1 expansion by 6, kxk depthwise, 1x1
   projection; the first at stride 2 on a 56 x 56 map of 24 channels, a residual add on the others)
   for k = 3, 5, 7; and each block's depthwise convolution alone between 1x1 padding convolutions
   (the smart-padding model). The script prints what the chain gains from k = 3 to k = 5 and 7 and
   what the padded models gain summed over the four blocks: a ratio near 1 means the padded rows
   carry the kernel's cost into the network.

    taskset -c 1 python tests/perf/litert_depthwise.py
    taskset -c 1 python tests/perf/litert_depthwise.py --rounds 9 --activation relu,hardswish

Networks are built in torch, exported to ONNX and converted by :mod:`bench.tflite_convert`
(float32), as ``bench`` converts them. Pin it to one core and keep the other idle.
"""
from __future__ import annotations

import argparse
import io
import random
import statistics
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

KERNELS = (3, 5, 7, 9)
CHAIN_KERNELS = (3, 5, 7)


def _onnx(module, shape) -> bytes:
    import torch  # noqa: PLC0415

    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), torch.randn(*shape), f, opset_version=17, dynamo=False)
    return f.getvalue()


def _models(channels: int, activations: list[str]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    import torch.nn as nn  # noqa: PLC0415

    acts = {"relu": nn.ReLU, "hardswish": nn.Hardswish, "silu": nn.SiLU}

    def dw(c: int, k: int, stride: int) -> nn.Module:
        return nn.Conv2d(c, c, k, stride, k // 2, groups=c)

    class Block(nn.Module):
        def __init__(self, c: int, k: int, act: str, stride: int) -> None:
            super().__init__()
            e = 6 * c
            self.stride = stride
            self.body = nn.Sequential(nn.Conv2d(c, e, 1), acts[act](), dw(e, k, stride), acts[act](), nn.Conv2d(e, c, 1))

        def forward(self, x):  # noqa: ANN001, ANN202
            y = self.body(x)
            return y if self.stride == 2 else x + y

    def padded(c: int, k: int | None, act: str, stride: int) -> nn.Module:
        inner = [dw(c, k, stride), acts[act]()] if k else []
        return nn.Sequential(nn.Conv2d(c, c, 1), *inner, nn.Conv2d(c, c, 1))

    single = {f"k{k}": _onnx(dw(channels, k, 1), (1, channels, 28, 28)) for k in KERNELS}
    c, h, e = 24, 56, 144
    chain: dict[str, bytes] = {}
    for a in activations:
        for k in CHAIN_KERNELS:
            blocks = [Block(c, k, a, 2)] + [Block(c, k, a, 1) for _ in range(3)]
            chain[f"chain {a} k{k}"] = _onnx(nn.Sequential(*blocks), (1, c, h, h))
            chain[f"padded/2 {a} k{k}"] = _onnx(padded(e, k, a, 2), (1, e, h, h))
            chain[f"padded/1 {a} k{k}"] = _onnx(padded(e, k, a, 1), (1, e, h // 2, h // 2))
    return single, chain


def _time(runners: dict[str, object], models: dict[str, tuple[str, object]], rounds: int, runs: int
          ) -> dict[str, tuple[float, float]]:
    """Median of the rounds' medians and the rounds' spread (max / min - 1) per model."""
    got: dict[str, list[float]] = {n: [] for n in models}
    rng = random.Random(0)
    order = [n for _ in range(rounds) for n in rng.sample(list(models), len(models))]  # each round shuffled
    for n in order:
        runner, prepared = models[n]
        got[n].append(runners[runner].time(prepared, warmup=5, runs=runs).median_ms)
    return {n: (statistics.median(v), max(v) / min(v) - 1.0) for n, v in got.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--channels", type=int, default=144, help="channels of the single depthwise convolution")
    ap.add_argument("--activation", default="hardswish", help="activations of the chains, comma-separated "
                    "(relu, hardswish, silu)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args(argv)
    from bench.runners.litert_runner import LiteRTRunner  # noqa: PLC0415
    from bench.tflite_convert import convert_onnx  # noqa: PLC0415

    acts = [a.strip() for a in args.activation.split(",") if a.strip()]
    single, chain = _models(args.channels, acts)
    runners = {"xnnpack": LiteRTRunner(threads=1), "builtin": LiteRTRunner(threads=1, use_xnnpack=False)}
    print(f"LiteRT {runners['xnnpack'].runtime} {runners['xnnpack'].runtime_version}, float32, 1 thread; "
          f"{args.rounds} interleaved rounds of {args.runs} runs (median of the round medians, spread)")
    tfl = {n: convert_onnx(b, "float32") for n, b in {**single, **chain}.items()}
    models = {f"{r} {n}": (r, runners[r].prepare(tfl[n])) for n in single for r in runners}
    models.update({f"xnnpack {n}": ("xnnpack", runners["xnnpack"].prepare(tfl[n])) for n in chain})
    med = _time(runners, models, args.rounds, args.runs)

    print(f"\n1. one depthwise convolution, {args.channels} x 28 x 28, stride 1:")
    for k in KERNELS:
        x, b = med[f"xnnpack k{k}"], med[f"builtin k{k}"]
        print(f"  {k}x{k}: XNNPACK {x[0]:.3f} ms (spread {x[1]:.0%}), built-in kernels {b[0]:.3f} ms "
              f"(spread {b[1]:.0%}): XNNPACK / built-in {x[0] / b[0]:.2f}")
    print("\n2. four inverted residuals (24 channels, 56 x 56, expansion 6, the first at stride 2), XNNPACK:")
    for n in chain:
        v = med[f"xnnpack {n}"]
        print(f"  {n:22s} {v[0]:.3f} ms (spread {v[1]:.0%})")
    for a in acts:
        m = {n: med[f"xnnpack {n}"][0] for n in chain}
        for k in CHAIN_KERNELS[1:]:
            d_chain = m[f"chain {a} k{k}"] - m[f"chain {a} k3"]
            d_pad = (m[f"padded/2 {a} k{k}"] - m[f"padded/2 {a} k3"]) + 3 * (m[f"padded/1 {a} k{k}"] - m[f"padded/1 {a} k3"])
            print(f"  {a}, 3x3 -> {k}x{k}: the chain {d_chain:+.3f} ms, the padded models summed {d_pad:+.3f} ms, "
                  f"ratio {d_chain / d_pad:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
