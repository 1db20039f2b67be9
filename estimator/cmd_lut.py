"""``estimator lut MODEL.onnx|zoo:NAME --device D``: a pruner's latency table of a network
(:mod:`estimator.pruning`; the format is in docs/pruning.md)."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from .cliargs import MODEL_HELP, input_shapes_from_args, model_source
from .cliutil import Rule, integer, number
from .cmd_model import _common, _estimator
from .errors import UserError
from .pruning import DEFAULT_STEP, LatencyModel, LatencyTable


def _parse_ratios(text: str) -> list[float]:
    out = [float(x) for x in text.replace(" ", "").split(",") if x]
    if not out:
        raise ValueError(text)
    return out


#: ``--ratios``: pruning ratios, comma-separated, each in [0, 1)
RATIOS = Rule("comma-separated numbers", _parse_ratios, "in [0, 1)", lambda v: all(0 <= r < 1 for r in v))
#: reasons printed per group kept whole (a transformer's residual width has one per layer norm)
SHOWN_REASONS = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "lut", help="latency table for channel pruning: every prunable layer at each kept-channel count",
        description="For every channel group of the network (the output channels of a conv or fc, with every "
                    "layer that reads them: the next layer's input channels, depthwise convs, pools, residual "
                    "adds), the latency of each layer the cut touches at each kept-channel count, in the "
                    "network's context (fused activations, the stem that reads the input, the device's free "
                    "ops), with CM_LV and CM_O intervals. Layer rows carry the network's calibration factor, so "
                    "the full-width rows sum to `estimator predict`'s total. Format: docs/pruning.md.")
    p.add_argument("model", metavar="MODEL.onnx", help=MODEL_HELP)
    _common(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--step", type=integer(min=1), default=None, metavar="N",
                   help=f"kept counts every N channels down from the full width (default {DEFAULT_STEP}; N counts "
                        "the producers' output channels: an attention's heads go one by one)")
    g.add_argument("--ratios", type=RATIOS, default=None, metavar="R,R,...",
                   help="pruning ratios in [0, 1) instead of a step, e.g. 0.25,0.5,0.75 (kept = c - floor(c r))")
    p.add_argument("--out", metavar="FILE.csv|FILE.json", help="write the whole table (CSV or JSON by extension)")
    p.add_argument("--json", action="store_true", help="print the whole table as JSON")
    p.add_argument("--monotone", action="store_true",
                   help="make each layer's latency non-increasing as channels fall (running minimum from the full "
                        "width; hides measured inversions, see docs/pruning.md)")
    p.add_argument("--confidence", type=number(above=0, below=1), default=0.9, metavar="C",
                   help="confidence of the intervals (default 0.9)")
    p.add_argument("--input-shape", action="append", metavar="[NAME:]1x3x224x224",
                   help="fix dynamic input dims (repeat for several inputs)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run, target="lum")


def run(args: argparse.Namespace) -> int:
    if args.out and not args.out.endswith((".csv", ".json")):
        raise UserError(f"--out must end in .csv or .json, got {args.out!r}")
    est = _estimator(args)
    src, name = model_source(args.model)
    lm = LatencyModel(est, src, confidence=args.confidence, input_shapes=input_shapes_from_args(args.input_shape),
                      name=name)
    bar: dict[str, Any] = {}

    def progress(done: int, total: int) -> None:
        if args.no_progress or not sys.stderr.isatty() or total < 4096:
            return
        if "b" not in bar:
            from tqdm import tqdm  # noqa: PLC0415

            bar["b"] = tqdm(total=total, desc="lut", unit="layer", file=sys.stderr)
        bar["b"].update(done - bar["b"].n)

    try:
        table = lm.table(step=args.step, ratios=args.ratios, monotone=args.monotone, progress=progress)
    finally:
        if "b" in bar:
            bar["b"].close()
    if args.out:
        (table.to_json if args.out.endswith(".json") else table.to_csv)(args.out)
    if args.json:
        table.to_json(sys.stdout)
    else:
        sys.stdout.write(format_table(table))
        if args.out:
            print(f"wrote {args.out}")
    return 0


def format_table(t: LatencyTable) -> str:
    """A summary: each prunable group's latency at a few kept counts (the whole table with --out)."""
    m = t.model
    n_rows = sum(len(v) for v in t.entries.values())
    lines = [f"{m.name or 'network'} on {m.estimator.device}: {t.total_ms:.4g} ms over {len(t.base)} layers "
             f"(calibration factor {m.factor:.3g}); {sum(g.prunable for g in m.groups)} prunable channel groups, "
             f"{n_rows} table rows" + (", monotone" if t.monotone else "")]
    lines.append("group  name                                   channels  layers  ms at kept channels (change)")
    for gr in m.groups:
        if not gr.prunable:
            continue
        ks = sorted({k for g, k in t.entries if g == gr.index}, reverse=True)
        show = ks if len(ks) <= 5 else [ks[round(j * (len(ks) - 1) / 4)] for j in range(5)]
        cells = "  ".join(f"{k}:{t.group_ms(gr.index, k):.3g}"
                          + (f" ({-t.saved_ms(gr.index, k):+.3g})" if k != gr.channels else "") for k in show)
        channels = f"{gr.channels}" + (f"x{gr.unit}" if gr.unit > 1 else "")  # heads x their projection's channels
        lines.append(f"{gr.index:5d}  {gr.name[:38]:38s} {channels:>8s} {len(gr.layers):7d}  {cells}")
    kept_whole = [gr for gr in m.groups if not gr.prunable and gr.producers]
    for gr in kept_whole:
        why = gr.blocked[:SHOWN_REASONS] + ([f"and {len(gr.blocked) - SHOWN_REASONS} more (the JSON table lists all)"]
                                            if len(gr.blocked) > SHOWN_REASONS else [])
        lines.append(f"kept whole: {gr.name} ({gr.channels * gr.unit} channels): {'; '.join(why)}")
    return "\n".join(lines) + "\n"
