"""concat: channel concatenation of k inputs."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import math

import numpy as np

from . import space
from .importing import attrs
from .ir import Op
from .params import LayerSpecError, dims_text, integer, io_bytes, positive
from .registry import NCHW, ChannelAxis, LayerCounts, LayerTypeSpec, register


def input_channels(p: Mapping[str, Any]) -> list[int]:
    """Channels per input: raw param ``channels`` (a list or "a,b,c"), else ``c_in1..c_in{n_inputs}``."""
    chans = p.get("channels")
    if chans is None:
        k = positive(p, "n_inputs", 2)
        chans = [positive(p, f"c_in{i + 1}") for i in range(k)]
    chans = _listed(chans)
    if len(chans) < 1 or min(chans) < 1:
        raise LayerSpecError(f"concat needs >= 1 input with >= 1 channel, got {chans}")
    return chans


def _listed(chans: Any) -> list[int]:
    """Raw param ``channels`` (a list of integers, or "a,b,c") as ints; anything else is refused."""
    items = chans.replace(",", " ").split() if isinstance(chans, str) else chans
    try:
        items = list(items)
    except TypeError:
        raise LayerSpecError(f"parameter 'channels' must list integers, got {chans!r}") from None
    out = []
    for i, c in enumerate(items):
        try:
            fc = float(c)
        except (TypeError, ValueError):
            fc = math.nan
        if not math.isfinite(fc) or fc != int(fc) or isinstance(c, bool):
            raise LayerSpecError(f"parameter 'channels' must list integers, got {c!r} at {i}")
        out.append(int(fc))
    return out


@register
class Concat(LayerTypeSpec):
    """Smart padding: one pad-in conv 1 -> c_i per input from the shared graph input; keys
    ``(h, w, c_i)`` in, ``(h, w, sum c_i)`` out. Vela writes an input's producer straight
    into the concatenation's output when the concatenation is its only reader, and copies the
    input otherwise (80x80, 64 + 64 channels: 0.44 ms for the copy against 0.21 ms for the
    conv that wrote it). Raw param ``shared`` lists the inputs that are copied: those another
    layer of the network also reads, and those no layer writes (a split's part, a graph
    input); feature ``c_shared`` counts their channels. In the padded model each of them gets
    a second reader, its own pad-out conv."""

    name = "concat"
    order = 100
    features = ("h", "w", "c_out", "n_inputs", "c_in1", "c_in2", "c_shared")
    ops_unit = "elements"
    summary = ("channel concatenation (ops = elements moved = bytes moved / element size; c_shared: the channels "
               "of the inputs another layer also reads or no layer writes)")
    tracks_shared_inputs = True
    required = ("h", "w")
    benchable = True
    sampled = True
    onnx_ops = ("Concat",)

    def channel_flow(self, p: Mapping[str, Any]) -> str:
        return "concat"

    def carries(self, p: Mapping[str, Any], node: Any, in_shape: Sequence[int], out_shape: Sequence[int],
                at: ChannelAxis) -> tuple[str, ChannelAxis] | None:
        """A concat of tokens (a class token before the patches: ``(n, tokens, features)``
        along axis 1) keeps the features, the importer's ``w``."""
        rank = len(in_shape)
        if rank != 3 or at.axis != 2 or int(attrs(node).get("axis", 1)) % rank == at.axis:
            return None
        return ("w", at) if int(p.get("h", 0)) == 1 and int(p.get("w", 0)) == int(in_shape[at.axis]) else None

    def n_inputs(self, p: Mapping[str, Any]) -> int:
        return len(input_channels(p))

    def channels_at(self, p: Mapping[str, Any], port: str | int) -> int:
        if not isinstance(port, int):
            return super().channels_at(p, port)
        return input_channels(p)[port]

    def with_channels(self, p: Mapping[str, Any], port: str | int, n: int) -> dict[str, Any]:
        if not isinstance(port, int):
            return super().with_channels(p, port, n)
        chans = input_channels(p)
        chans[port] = int(n)
        q = {k: v for k, v in p.items() if not (k.startswith("c_in") or k == "n_inputs")}
        q["channels"] = chans
        return q

    def zero_channels(self, p: Mapping[str, Any]) -> bool:
        """Every input has 0 channels (a concat with some inputs empty stays an error)."""
        chans = p.get("channels")
        if chans is None:
            chans = [integer(p, f"c_in{i + 1}") for i in range(positive(p, "n_inputs", 2))]
        chans = _listed(chans)
        return bool(chans) and not any(chans) and all(p.get(k) is not None for k in self.required)

    def brief(self, p: Mapping[str, Any]) -> str:
        return f"{dims_text(p.get('h'), p.get('w'))} [{'+'.join(str(c) for c in p.get('channels', []))}]"

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        n, h, w = positive(p, "n", 1), positive(p, "h"), positive(p, "w")
        chans = input_channels(p)
        c_out = sum(chans)
        out = n * h * w * c_out
        shared = self.shared_inputs(p)
        if shared and shared[-1] >= len(chans):
            raise LayerSpecError(f"shared input {shared[-1]} of a concat of {len(chans)} inputs")
        feats = dict(h=h, w=w, c_out=c_out, n_inputs=len(chans), c_in1=chans[0],
                     c_in2=chans[1] if len(chans) > 1 else 0, c_shared=sum(chans[i] for i in shared))
        return LayerCounts(feats, 0, 0, float(out), io_bytes(out, out, 0, eb), (n, c_out, h, w))

    def lum_inputs(self, p: Mapping[str, Any], counts: LayerCounts,
                   model_format: str = "onnx") -> tuple[NCHW, ...]:
        h, w = int(p["h"]), int(p["w"])
        return tuple((1, c, h, w) for c in input_channels(p))

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        return [Op("concat", "lum", tuple(ins), out_name, out_shape, {"axis": 1})]

    def from_onnx(self, n: Any, g: Any) -> Any:
        """A concat along channels; along another axis h = w = 1 and channels are the inputs'
        elements per batch item (flag ``non_channel_axis``)."""
        d = g.base(n, self.name)
        ins = [x for x in n.input if x]
        out = n.output[0]
        ys = g.shape(out)
        shapes = [g.shape(x) for x in ins]
        if ys is None or any(s is None for s in shapes):
            d.flag("unknown_shape")
            d.params = dict(n=1, h=1, w=1, channels=[1] * max(len(ins), 1))
            return d
        axis = int(attrs(n).get("axis", 1)) % max(len(ys), 1)
        if len(ys) in (3, 4) and axis == 1:
            n_, c, h, w = g.nchw(out)
            d.params = dict(n=n_, h=h, w=w, channels=[int(s[1]) for s in shapes])
        else:
            n_ = ys[0] if len(ys) > 1 and axis != 0 else 1
            d.flag("non_channel_axis")
            d.params = dict(n=n_, h=1, w=1, channels=[max(math.prod(s) // n_, 1) for s in shapes])
        if n_ > 1:
            d.flag("batch_gt_1")
        return d

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        h, w = space.hw(r, prior)
        k = 2 if r.random() < 0.8 else int(r.integers(3, 5))
        if k == 2:
            return dict(h=h, w=w, c_in1=space.channels(r, 1024, prior, h), c_in2=space.channels(r, 1024, prior, h))
        c = space.channels(r, 512, prior, h)
        chans = [c] * k if r.random() < 0.6 else [space.channels(r, 512, prior, h) for _ in range(k)]  # SPPF: equal
        return dict(h=h, w=w, channels=chans)

    def in_ranges(self, p: Mapping[str, Any], ins: Sequence[tuple[int, ...]], out: tuple[int, ...]) -> bool:
        return self._in_ranges(p, ins, out, [s[1] for s in ins])  # the inputs' channels, not their sum
