"""``estimator layers MODEL.onnx``: the layers the estimator sees in an ONNX model."""
from __future__ import annotations

import argparse
import json
import sys

from .layers import SPECS, Layer, LayerType
from .layers.params import dims_text
from .cliargs import MODEL_HELP, input_shapes_from_args, model_source
from .cliutil import number
from .onnx_import import DEFAULT_SIMPLIFY_TIMEOUT_S, Network, load_network


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "layers", help="list the layers of an ONNX model (types, features, MACs, params, fusion)",
        description="Simplify an ONNX model (onnxsim), extract its layers in topological order with the "
                    "generic fusion rules, and print them with totals, warnings and the operators outside "
                    "the layer vocabulary.")
    p.add_argument("model", metavar="MODEL.onnx", help=MODEL_HELP)
    p.add_argument("--input-shape", action="append", default=[], metavar="[NAME:]DIMS",
                   help="fix an input's shape, e.g. 1x3x224x224 (single input) or input:1x3x224x224; repeatable")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--no-simplify", action="store_true", help="skip onnxsim (use ONNX shape inference only)")
    p.add_argument("--simplify-timeout", type=number(above=0), default=DEFAULT_SIMPLIFY_TIMEOUT_S, metavar="SECONDS",
                   help=f"limit for onnxsim (default {DEFAULT_SIMPLIFY_TIMEOUT_S:g})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    src, _ = model_source(args.model)
    net = load_network(src, input_shapes=input_shapes_from_args(args.input_shape),
                       simplify=not args.no_simplify, simplify_timeout_s=args.simplify_timeout)
    if args.json:
        d = net.to_dict()
        d["file"] = str(args.model)
        json.dump(d, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_network(net, str(args.model)))
    return 0


# ------------------------------------------------------------------------- formatting


def key_features(layer: Layer) -> str:
    """A short, human-readable summary of a layer's raw parameters (its type's
    :meth:`~estimator.layers.registry.LayerTypeSpec.brief`), else its input shape."""
    try:
        s = SPECS[layer.type].brief(layer.params) if layer.type in SPECS else None
    except (TypeError, ValueError):
        s = None
    if s:
        return s
    shape = layer.input_shapes[0] if layer.input_shapes else ()
    return "in " + (dims_text(*shape) if shape else "?")


def _num(x: float) -> str:
    x = float(x)
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.2f}{unit}"
    return f"{int(x)}"


def _clip(s: str, width: int) -> str:
    return s if len(s) <= width else "…" + s[-(width - 1):]


def format_network(net: Network, title: str = "") -> str:
    rows = []
    for i, layer in enumerate(net.layers):
        rows.append([str(i), layer.name, layer.type if layer.type != LayerType.OTHER else f"other:{layer.op_type}",
                     key_features(layer), _num(layer.macs), _num(layer.n_params), layer.activation or "",
                     ",".join(layer.flags)])
    head = ["#", "name", "type", "features", "MACs", "params", "act", "flags"]
    caps = [5, 48, 28, 40, 9, 9, 12, 60]
    widths = [min(max([len(head[c])] + [len(r[c]) for r in rows]), caps[c]) for c in range(len(head))]
    right = {0, 4, 5}
    lines = []
    if title:
        ins = ", ".join(f"{k} {dims_text(*v)}" for k, v in net.inputs.items())
        lines.append(f"{title}: opset {net.opset}, inputs {ins}, "
                     f"{'simplified with onnxsim' if net.simplified else 'not simplified'}")
    for r in [head] + rows:
        cells = [_clip(v, widths[c]) for c, v in enumerate(r)]
        lines.append("  ".join(v.rjust(widths[c]) if c in right else v.ljust(widths[c])
                               for c, v in enumerate(cells)).rstrip())
    lines.append(f"totals: {len(net.layers)} layers, {_num(net.macs)} MACs ({net.macs}), "
                 f"{_num(net.params)} params ({net.params}), {_num(net.ops)} ops; "
                 f"{len(net.free_nodes)} free node(s)")
    others = net.other_layers
    if others:
        lines.append(f"other (outside the layer vocabulary): {len(others)} layer(s)")
        for layer in others:
            lines.append(f"  {layer.op_type}: {layer.name}")
    for w in net.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines) + "\n"
