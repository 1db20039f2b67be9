"""transpose: transpose / channel shuffle / depth-to-space, counted by the elements moved.

What a transpose costs depends on whether it keeps the last axis in place (contiguous rows
are copied: token layouts' (b, n, heads, d) -> (b, heads, n, d)) or moves it (every element
is gathered with a stride: k^T in attention, NCHW <-> NHWC): the ``moves_last`` feature.
Smart padding measures a rank-4 transpose of ``(1, c, h, w)`` with perm (0, 2, 1, 3) (last
axis kept) or (0, 1, 3, 2) (last axis moved), fed and read as rows
(:func:`~estimator.layers.registry.rows_of`, reshaped as views). In TFLite the tensor is the
rank-3 ``(c, h, w)`` between RESHAPEs of the NHWC rows and the permutation (1, 0, 2) or
(0, 2, 1): rank 4 is NHWC there and would move other axes than the ONNX model does.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from . import space
from .importing import attrs
from .ir import Op, tf_axis
from .params import nonneg, opt_int
from .registry import NCHW, ChannelAxis, LayerCounts, doubled_port, register, reshape_op, rows_of
from .shared import MemoryBound, generic_draft

_PRIOR_SMALL = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192)
#: Network prior: channels of MobileViT's transformer stages (XXS to S)
_PRIOR_PATCH_C = (64, 80, 96, 120, 144, 160, 192, 240)


def reduced_transpose(shape: Sequence[int], perm: Sequence[int]) -> tuple[int, int, int, int]:
    """``(c, h, w, moves_last)`` of the rank-4 transpose that moves the elements of a transpose of
    ``shape`` by ``perm`` as it does.

    Axes of size 1 are dropped, and axes next to each other in the input that stay next to each
    other, in the same order, in the output are merged (they move as one): what is left is the
    transpose's own rank. ``w`` is the last input axis left. If it stays last (contiguous rows
    of ``w`` copied), ``h`` is the first axis the output puts somewhere else (leading axes
    that stay in place are a batch) and ``c`` the rest: ``(a, b, w) -> (b, a, w)`` is exactly
    ``(1, a, b, w)`` by (0, 2, 1, 3), and ``(n, a, b, w) -> (n, b, a, w)`` is ``(1, n a, b, w)``. If it moves (a
    strided gather), ``h`` is the axis the output puts last and ``c`` the rest: ``(a, b, w) ->
    (a, w, b)`` is exactly ``(1, a, b, w)`` by (0, 1, 3, 2). Rank 3 and below are exact; a higher
    rank (MobileViT's 2x2 unfolding, ``(d, h/2, 2, w/2, 2) -> (2, 2, h/2, w/2, d)``) keeps the
    innermost move and folds the rest into ``c``, where the element count stays. Rank 5 and 6
    tensors (a transformer's ``(b, tokens, 3, heads, d) -> (3, b, heads, tokens, d)``, YOLO's
    and ShuffleNet's rank-5 views) read this way are the transposes they are, not their
    trailing dimensions lumped into ``w``."""
    kept = [a for a in range(len(shape)) if shape[a] > 1]
    order = [a for a in perm if shape[a] > 1]
    groups: list[list[int]] = []  # in output order
    for a in order:
        if groups and kept.index(a) == kept.index(groups[-1][-1]) + 1:
            groups[-1].append(a)
        else:
            groups.append([a])
    if len(groups) <= 1:  # only axes of size 1 move: a copy
        return 1, 1, max(int(math.prod(shape)), 1), 0
    size = {g[0]: int(math.prod(shape[a] for a in g)) for g in groups}
    total = math.prod(size.values())
    last = max(size)  # the group holding the last input axis left
    w = size[last]
    moves_last = int(groups[-1][0] != last)
    if moves_last:
        h = size[groups[-1][0]]
    else:  # the first output axis that is not where it was (those before it are a batch)
        firsts = sorted(size)
        h = size[next(g[0] for i, g in enumerate(groups) if g[0] != firsts[i])]
    return total // (h * w), h, w, moves_last


@register
class Transpose(MemoryBound):
    name = "transpose"
    order = 150
    features = ("h", "w", "c", "moves_last")  # (rank is a raw param only: every row is rank 4)
    summary = "transpose / channel shuffle (moves_last=1: the last axis moves, a strided gather)"
    extra = ("moves_last",)
    onnx_ops = ("Transpose", "DepthToSpace", "SpaceToDepth")
    benchable = True
    model_formats = ("onnx", "tflite")
    sampled = True
    examples = (dict(h=197, w=64, c=3, rank=4, moves_last=1), dict(h=3, w=64, c=197, rank=4, moves_last=0))

    def with_channels(self, p: Mapping[str, Any], port: str | int, n: int) -> dict[str, Any]:
        """Read again as the transpose it then is (:func:`reduced_transpose`): cut to one
        channel, an axis that moved may be left with nothing to move (attention's heads
        merged back, cut to one head: a copy)."""
        q = super().with_channels(p, port, n)
        if "moves_last" not in q:
            return q
        c, h, w, moves_last = reduced_transpose((1, int(q["c"]), int(q["h"]), int(q["w"])), self._perm(q))
        return {**q, "c": c, "h": h, "w": w, "moves_last": moves_last}

    def _perm(self, p: Mapping[str, Any]) -> tuple[int, int, int, int]:
        return (0, 1, 3, 2) if nonneg(p, "moves_last", 0) else (0, 2, 1, 3)

    def _io(self, p: Mapping[str, Any]) -> tuple[NCHW, NCHW]:
        x = (1, int(p["c"]), int(p["h"]), int(p["w"]))
        a, b, c, d = (x[i] for i in self._perm(p))
        return x, (a, b, c, d)

    def lum_inputs(self, p: Mapping[str, Any], counts: LayerCounts,
                   model_format: str = "onnx") -> tuple[NCHW, ...]:
        return (rows_of(self._io(p)[0], model_format),)

    def lum_output(self, p: Mapping[str, Any], counts: LayerCounts, model_format: str = "onnx") -> NCHW:
        return rows_of(self._io(p)[1], model_format)

    def in_ranges(self, p: Mapping[str, Any], ins: Sequence[tuple[int, ...]], out: tuple[int, ...]) -> bool:
        return self._rows_in_ranges((*ins, out))

    def single_layer_io(self, p: Mapping[str, Any], ins: tuple[NCHW, ...], out: NCHW,
                        model_format: str = "onnx") -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
        x, y = self._io(p)
        if model_format == "tflite":
            return (x[1:],), y[1:]
        return (x,), y

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        x, y = self._io(p)
        perm = {"perm": list(self._perm(p))}
        if model_format == "tflite":  # rank 3 (c, h, w): a rank-4 tensor is NHWC there
            x, y, perm = x[1:], y[1:], {"perm": [a - 1 for a in self._perm(p)[1:]]}
        if single:
            return [Op(self.name, "lum", tuple(ins), out_name, y, perm)]
        return [reshape_op("lum/reshape_in", ins[0], "lum_x", x), Op(self.name, "lum", ("lum_x",), "lum_y", y, perm),
                reshape_op("lum/reshape_out", "lum_y", out_name, out_shape)]

    def onnx_nodes(self, op: Op, output: str, weights: Mapping[str, np.ndarray], init: Any) -> list[Any]:
        from onnx import helper  # noqa: PLC0415

        return [helper.make_node("Transpose", [op.inputs[0]], [output], name=op.name, perm=list(op.attrs["perm"]))]

    def tflite_ops(self, op: Op, ins: Sequence[Any], weights: Mapping[str, np.ndarray]) -> Any:
        """TRANSPOSE; a rank-4 (NHWC) tensor gets the IR's permutation in NHWC terms."""
        import tensorflow as tf  # noqa: PLC0415

        perm = [int(a) for a in op.attrs["perm"]]
        if len(perm) == 4:  # output axis i is IR axis (0, 2, 3, 1)[i]
            perm = [tf_axis(perm[n], 4) for n in (0, 2, 3, 1)]
        return tf.transpose(ins[0], perm)

    def carries(self, p: Mapping[str, Any], node: Any, in_shape: Sequence[int], out_shape: Sequence[int],
                at: ChannelAxis) -> tuple[str, ChannelAxis] | None:
        """A transpose moves the channels with their axis to where its permutation puts it (a
        patch embedding's ``(n, c, tokens) -> (n, tokens, c)``); they are in the one of the
        reduced ``(c, h, w)`` that alone doubles when they double."""
        rank = len(in_shape)
        if node.op_type != "Transpose" or not 0 <= at.axis < rank:
            return None
        perm = [int(a) for a in attrs(node).get("perm", range(rank - 1, -1, -1))]
        if sorted(perm) != list(range(rank)):
            return None
        port = doubled_port(p, lambda s: reduced_transpose(s, perm), in_shape, at)
        return None if port is None else (port, at.moved(perm.index(at.axis)))

    def count(self, p: dict[str, Any], eb: int) -> LayerCounts:
        counts = super().count(p, eb)
        if opt_int(p, "rank", 0) == 4 or "moves_last" in p:
            n = opt_int(p, "n", 1)
            x = (n, int(p["c"]), int(p["h"]), int(p["w"]))
            counts = LayerCounts(counts.features, counts.macs, counts.params, counts.ops, counts.bytes,
                                 tuple(x[i] for i in self._perm(p)))
        return counts

    def from_onnx(self, n: Any, g: Any) -> Any:
        """A Transpose as the rank-4 transpose smart padding measures (:func:`reduced_transpose`:
        ``(c, h, w)`` and ``moves_last``); DepthToSpace / SpaceToDepth by their input's rows."""
        xs = g.shape(n.input[0])
        rank = len(xs or ()) or 4
        if n.op_type != "Transpose":  # DepthToSpace / SpaceToDepth interleave the last axis
            return generic_draft(n, g, self.name, rank=rank, moves_last=1)
        perm = [int(a) for a in attrs(n).get("perm", range(rank - 1, -1, -1))]
        if xs is None or sorted(perm) != list(range(len(xs))):
            return generic_draft(n, g, self.name, rank=rank, moves_last=int(bool(perm) and perm[-1] != rank - 1))
        c, h, w, moves_last = reduced_transpose(xs, perm)
        d = generic_draft(n, g, self.name, rank=rank, moves_last=moves_last)
        d.params.update(n=1, c=c, h=h, w=w)
        return d

    def prior_variant(self, p: dict[str, Any], unit: space.UnitHash) -> dict[str, Any]:
        """A fifth of the prior's draws become MobileViT's unfolding of a ``c`` x ``s`` x ``s``
        map into 2x2 patches or its folding back, as the importer describes them: ``(c s, s/2,
        2)`` and ``(c s^2/4, 2, 2)`` with the first two axes swapped (MobileViT-XS: ``(3072, 16,
        2)`` and ``(24576, 2, 2)``), thousands of rows of 2 elements (its attention transposes
        are the token draws). Chosen by the configuration's hash, so the other draws keep their
        keys."""
        u = unit(p, "patches")
        if u >= 0.2:
            return p
        side = (8, 16, 32)[int(3 * unit(p, "patches-side"))]
        c = _PRIOR_PATCH_C[int(len(_PRIOR_PATCH_C) * unit(p, "patches-c"))]
        if u < 0.1:
            return dict(h=side // 2, w=2, c=c * side, rank=4, moves_last=0)  # unfold
        return dict(h=2, w=2, c=c * (side // 2) ** 2, rank=4, moves_last=0)  # fold

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        if prior:
            t, s = int(r.choice(space.PRIOR_TOKENS)), int(r.choice(_PRIOR_SMALL))
            if r.random() < 0.5:  # (1, heads, tokens, d) -> (1, heads, d, tokens)
                return dict(h=t, w=s, c=int(r.choice(space.PRIOR_HEADS)), rank=4, moves_last=1)
            return dict(h=int(r.choice(space.PRIOR_HEADS)), w=s, c=t, rank=4, moves_last=0)  # heads <-> tokens
        return dict(h=space.loguniform_int(r, 1, 1024), w=space.loguniform_int(r, 1, 1024),
                    c=space.loguniform_int(r, 1, 1024), rank=4, moves_last=int(r.random() < 0.5))
