"""Latency for channel pruning: every prunable layer of a network, in the network's context.

A pruner removes output channels of a dense convolution (or an fc); every layer that reads
those channels shrinks with it: a depthwise conv, a pool, a residual add, and the next
convolution's input channels. Layers whose outputs meet in an add (the residual stages of a
ResNet) lose the same channels together. :func:`channel_groups` finds these *channel groups*
by walking the imported network's ONNX graph; each layer type says how it carries channels
(:meth:`~estimator.layers.registry.LayerTypeSpec.channel_flow`). A group is kept whole
(``blocked``) where a layer reads channels in a way pruning cannot follow (a grouped conv, a
channel shuffle) and where its channels leave the network (the classifier). A transformer's
width is one group through its token layout (a patch embedding, MobileViT's unfolding into
patches and back): each type says where a reshape, a transpose, a layer norm or a token concat
carries the channels (:meth:`~estimator.layers.registry.LayerTypeSpec.carries`). An attention's
heads are one group too, one channel per head: the reshape that splits the q/k/v projection's
outputs into heads makes each head that many of them (:attr:`ChannelGroup.unit`), and the
products and the softmax carry them as a batch.

:class:`LatencyModel` answers a pruner's questions in that context: a layer's latency at
given channel counts (:meth:`~LatencyModel.layer`, cached), a group's latency at a kept count
(:meth:`~LatencyModel.group_ms`), and the whole pruned network's estimate with its calibrated
intervals (:meth:`~LatencyModel.estimate`). The context is the network's own: fused
activations, the stem that reads the network's input (``graph_input``), weights read from DRAM
(``cold``), the layers the device runs for free. :meth:`~LatencyModel.table` (``estimator
lut``) writes the table pruners read (HALP, NetAdapt): for each prunable group and kept
count, every layer the cut touches, with its CM_LV and CM_O intervals.

Every layer row carries the network's calibration factor (its calibrated total over its
Eq. 7 total), so the full-width rows sum to ``estimator predict``'s total for the network.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Mapping, Sequence

from .errors import UserError
from .layers import SPECS, Layer, describe
from .layers.registry import ChannelAxis
from .predict import Estimator, LayerEstimate, NetworkEstimate, parse_confidence

__all__ = ["Port", "ChannelGroup", "channel_groups", "module_name", "LayerLatency", "LatencyModel",
           "LatencyTable", "latency_table", "estimate_module", "kept_counts", "TABLE_COLUMNS", "DEFAULT_STEP"]


# ------------------------------------------------------------------ channel groups


@dataclass(frozen=True)
class Port:
    """Where a channel group's channels are counted in one layer: ``port`` is ``"out"`` (a
    producer's output channels), ``"in"`` (a consumer's input channels), ``"through"`` (a
    layer that keeps them), ``"c"``, ``"h"`` or ``"w"`` (the raw parameter that holds them in a
    token layout), ``"flatten"`` or a concat input's index; ``mult`` channels there
    per channel of the group (a flatten's ``h x w``)."""

    layer: int
    port: str | int
    mult: int = 1


@dataclass
class ChannelGroup:
    """Channels that are pruned together (see the module docstring)."""

    index: int
    name: str
    channels: int
    ports: list[Port]
    #: why the group is kept whole ([]: prunable)
    blocked: list[str] = field(default_factory=list)

    @property
    def producers(self) -> list[int]:
        return [p.layer for p in self.ports if p.port == "out"]

    @property
    def prunable(self) -> bool:
        return not self.blocked and bool(self.producers)

    @property
    def unit(self) -> int:
        """Its producers' output channels per channel of the group: 1, or for an attention's
        heads each head's q, k and v entries in the projection."""
        return min((p.mult for p in self.ports if p.port == "out"), default=1)

    @property
    def layers(self) -> list[int]:
        return sorted({p.layer for p in self.ports})

    def to_dict(self, layers: Sequence[Layer]) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "channels": self.channels, "unit": self.unit,
                "prunable": self.prunable,
                "blocked": list(self.blocked), "producers": [layers[i].name for i in self.producers],
                "modules": [module_name(layers[i].name) for i in self.producers],
                "ports": [{"layer": layers[p.layer].name, "index": p.layer, "port": p.port, "mult": p.mult}
                          for p in self.ports]}


def module_name(layer_name: str) -> str:
    """The torch module path of a layer exported by torch's ONNX exporter:
    ``/layer1/layer1.0/conv1/Conv`` -> ``layer1.0.conv1``,
    ``/features/features.1/conv/conv.0/conv.0.0/Conv`` -> ``features.1.conv.0.0`` (the
    exporter names each scope relative to the enclosing module)."""
    stack: list[str] = []
    for c in layer_name.strip("/").split("/")[:-1]:
        if stack and c.startswith(stack[-1] + "."):
            stack[-1] = c
        else:
            stack.append(c)
    return ".".join(stack)


class _Groups:
    """Union-find over provisional groups while the graph is walked."""

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.channels: list[int] = []
        self.ports: list[list[Port]] = []
        self.blocked: list[list[str]] = []

    def new(self, channels: int, why: str = "") -> int:
        self.parent.append(len(self.parent))
        self.channels.append(int(channels))
        self.ports.append([])
        self.blocked.append([why] if why else [])
        return len(self.parent) - 1

    def find(self, g: int) -> int:
        while self.parent[g] != g:
            self.parent[g] = self.parent[self.parent[g]]
            g = self.parent[g]
        return g

    def union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a == b:
            return
        if self.channels[a] != self.channels[b]:
            why = f"element-wise layer joins {self.channels[a]} and {self.channels[b]} channels"
            self.block(a, why)
            self.block(b, why)
        self.parent[b] = a
        self.ports[a] += self.ports[b]
        self.blocked[a] += [w for w in self.blocked[b] if w not in self.blocked[a]]

    def block(self, g: int, why: str) -> None:
        g = self.find(g)
        if why not in self.blocked[g]:
            self.blocked[g].append(why)

    def add(self, g: int, port: Port) -> None:
        self.ports[self.find(g)].append(port)

    def refactor(self, g: int, f: int) -> None:
        """Group ``g``'s channels taken ``f`` at a time: ``1/f`` as many, each port counting
        ``f`` times as many per channel."""
        g = self.find(g)
        self.channels[g] //= f
        self.ports[g] = [Port(p.layer, p.port, p.mult * f) for p in self.ports[g]]


Segments = list[tuple[int, int]]  # (group, channels of the tensor per channel of the group)
#: the ports of a layer that keeps a group's channels
_KEEPING_PORTS = ("through", "c", "h", "w", "b")


def _channels(groups: _Groups, segs: Segments) -> int:
    return sum(groups.channels[groups.find(g)] * m for g, m in segs)


def _count(spec: Any, p: Mapping[str, Any], port: str | int) -> int:
    """A layer's channels at ``port``, -1 where it has none."""
    try:
        return spec.channels_at(p, port)
    except (KeyError, IndexError, TypeError, ValueError):
        return -1


def _carried(spec: Any, layer: Layer, main: Any, data: Sequence[str], ins: Sequence[Segments], groups: _Groups,
             axes: Mapping[str, tuple[int, int]], canon: Callable[[str], str], segs: dict[str, Segments]
             ) -> tuple[str, int, Segments, tuple[int, int]] | None:
    """Where ``layer`` carries the channels of its data inputs, each holding one group, in a
    way its type's :meth:`~estimator.layers.registry.LayerTypeSpec.carries` names: ``(port, the
    port's channels per channel of the group, the output's segments, the output's (axis,
    inner))``; None where it does not. Two inputs (attention's products) must carry theirs to
    the same port and output axis; their groups become one. Where a reshape splits a group's
    channels over several axes (attention's heads), the group's channels become the entries of
    the axis it names, each that many of the old ones (only while no other tensor holds the
    group)."""
    if spec is None or main is None or not 1 <= len(data) <= 2 or any(len(s) != 1 for s in ins) \
            or len(layer.input_shapes or ()) < len(data) or not layer.output_shapes:
        return None
    out_shape = layer.output_shapes[0]
    found: tuple[str, ChannelAxis] | None = None
    for x, s, shape in zip(data, ins, layer.input_shapes):
        (gid, m), = s
        k = groups.channels[groups.find(gid)]
        axis, inner = axes.get(canon(x), (-1, 1))
        if not 0 <= axis < len(shape) or int(shape[axis]) != k * m or k < 1:
            return None
        carried = spec.carries(layer.params, main, shape, out_shape, ChannelAxis(axis, k, inner))
        if carried is None or (found is not None and carried != found):
            return None
        found = carried
    assert found is not None
    port, at = found
    gid, m = ins[0][0]
    for s in ins[1:]:
        groups.union(gid, s[0][0])
    root = groups.find(gid)
    k = groups.channels[root]
    if at.size != k:  # a split: the group's channels become the entries of axis at.axis
        held = segs[canon(data[0])]  # (one list for all the outputs of the layer that wrote it)
        if len(data) != 1 or m != 1 or at.size < 2 or k % at.size or len(held) != 1 \
                or any(ss is not held and any(groups.find(g) == root for g, _ in ss) for ss in segs.values()):
            return None
        groups.refactor(root, k // at.size)
        held[:] = [(gid, k // at.size)]
        k = at.size
    count = _count(spec, layer.params, port)
    if count < k or count % k or not 0 <= at.axis < len(out_shape) or int(out_shape[at.axis]) % k:
        return None
    return port, count // k, [(gid, int(out_shape[at.axis]) // k)], (at.axis, at.inner)


def _channel_axis(layer: Layer) -> int:
    """The axis of the channels of the tensor a layer writes: 1, but the last axis of a rank-3
    tensor that is not a convolution's ``[batch, channels, length]``, which the other layers
    write as tokens ``[batch, tokens, features]`` (a transformer's; the next fc reads the
    features)."""
    shape = layer.output_shapes[0] if layer.output_shapes else ()
    if len(shape) == 3 and layer.op_type != "Conv":
        return 2
    return 1 if len(shape) > 1 else 0


def _new_channels(layer: Layer) -> int:
    """The channels of a tensor that a layer pruning cannot follow writes (a transpose, a
    reshape, attention, a grouped conv), on :func:`_channel_axis`."""
    shape = layer.output_shapes[0] if layer.output_shapes else ()
    return int(shape[_channel_axis(layer)]) if len(shape) > 1 else 1


def channel_groups(network: Any) -> list[ChannelGroup]:
    """The channel groups of an imported network (:class:`~estimator.onnx_import.Network`:
    its ``layers`` and the ONNX ``model`` they came from), producers first in layer order."""
    model = network.model
    layers: list[Layer] = list(network.layers)
    if model is None:
        raise UserError("channel groups need the network's ONNX graph (import it with estimator.onnx_import)")
    g = model.graph
    node_layer: dict[str, int] = {}
    for i, l in enumerate(layers):
        for n in l.nodes or [l.name]:
            node_layer[str(n)] = i
    const = {t.name for t in g.initializer}
    alias: dict[str, str] = {}
    for n in g.node:  # nodes outside every layer: constants, or views such as Identity
        if n.name in node_layer:
            continue
        data = [x for x in n.input if x and x not in const]
        if not data:
            const.update(n.output)
        elif len(data) == 1 and len(n.output) == 1:
            alias[n.output[0]] = data[0]

    def canon(t: str) -> str:
        while t in alias:
            t = alias[t]
        return t

    nodes = {n.name: n for n in g.node}
    groups = _Groups()
    segs: dict[str, Segments] = {}
    axes: dict[str, tuple[int, int]] = {}  # each tensor's channel axis and entries per channel there
    for inp in g.input:
        if inp.name in const:
            continue
        dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        segs[inp.name] = [(groups.new(dims[1] if len(dims) > 1 and dims[1] > 0 else 1, "the network's input"), 1)]
        axes[inp.name] = (1, 1)

    def of(t: str) -> Segments:
        t = canon(t)
        if t not in segs:  # produced by something this walk does not know: keep it whole
            segs[t] = [(groups.new(1, f"tensor {t} comes from outside the layers"), 1)]
        return segs[t]

    for i, layer in enumerate(layers):
        spec = SPECS.get(layer.type)
        own = [nodes[str(n)] for n in (layer.nodes or [layer.name]) if str(n) in nodes]
        produced = {o for n in own for o in n.output}
        main = next((n for n in own if n.op_type == layer.op_type), own[0] if own else None)
        data = [x for x in (main.input if main is not None else []) if x and x not in const and x not in produced]
        flow = spec.channel_flow(layer.params) if spec is not None else ""
        if flow in ("mix", "through", "flatten") and data:
            data = data[:1] if flow != "through" or layer.type not in ("add", "mul") else data
        ins = [of(x) for x in data]
        what = f"{layer.type} layer {layer.name}"
        out: Segments
        out_axis = (_channel_axis(layer), 1)
        sizes = [_channels(groups, s) for s in ins]
        port = flow
        elsewhere = flow == "mix" and not (ins and _count(spec, layer.params, "in") == sizes[0])
        if elsewhere:  # reads its input's channels on another axis (a token input read as [batch, channels, ...])
            for s in ins:
                for gid, _ in s:
                    groups.block(gid, f"{what} reads its channels on another axis")
        elif flow == "through" and ins:
            if _count(spec, layer.params, "through") != sizes[0]:
                # token rows (1, rows, 1, channels): the channels are the layer's w
                flow = "" if (layer.params.get("h", 1), layer.params.get("w")) != (1, sizes[0]) else flow
                port = "w"
        elif flow == "concat" and not (ins and all(_count(spec, layer.params, k) == c for k, c in enumerate(sizes))):
            flow = ""
        if flow == "mix":
            for gid, m in ins[0] if not elsewhere else ():
                groups.add(gid, Port(i, "in", m))
            out = [(groups.new(spec.channels_at(layer.params, "out")), 1)]
            groups.add(out[0][0], Port(i, "out", 1))
        elif flow == "through" and ins:
            main_segs = ins[0]
            for s, c in zip(ins[1:], sizes[1:]):
                if c == 1 and sizes[0] != 1:
                    continue  # a broadcast operand of one channel
                if c != sizes[0] or len(s) != len(main_segs) or [m for _, m in s] != [m for _, m in main_segs]:
                    for gid, _ in s + main_segs:
                        groups.block(gid, f"{what} joins tensors of different channel layouts")
                    continue
                for (a, _), (b, _) in zip(main_segs, s):
                    groups.union(a, b)
            for gid, m in main_segs:
                groups.add(gid, Port(i, port, m))
            out = main_segs
            out_axis = axes.get(canon(data[0]), out_axis)
        elif flow == "concat":
            out = []
            for k, s in enumerate(ins):
                for gid, m in s:
                    groups.add(gid, Port(i, k, m))
                out += s
            out_axis = axes.get(canon(data[0]), out_axis)
        elif flow == "flatten" and ins and layer.input_shapes and len(layer.input_shapes[0]) == 4 \
                and layer.output_shapes and len(layer.output_shapes[0]) == 2:
            n_, c, h, w = (int(x) for x in layer.input_shapes[0])
            if int(layer.output_shapes[0][1]) != c * h * w:
                for gid, _ in ins[0]:
                    groups.block(gid, f"{what} does not flatten c x h x w")
                out = [(groups.new(int(layer.output_shapes[0][1]), f"output of {what}"), 1)]
            else:
                for gid, m in ins[0]:
                    groups.add(gid, Port(i, "flatten", m))
                out = [(gid, m * h * w) for gid, m in ins[0]]
                out_axis = (1, axes.get(canon(data[0]), (1, 1))[1] * h * w)
        elif (carried := _carried(spec, layer, main, data, ins, groups, axes, canon, segs)) is not None:
            port, mult, out, out_axis = carried
            groups.add(out[0][0], Port(i, port, mult))
        else:
            for s in ins:
                for gid, _ in s:
                    groups.block(gid, f"{what} reads its channels in a way pruning cannot follow")
            out = [(groups.new(_new_channels(layer), f"output of {what}"), 1)]
        for n in own:
            for o in n.output:
                segs[o] = out
                axes[o] = out_axis
    for o in g.output:
        for gid, _ in segs.get(canon(o.name), []):
            groups.block(gid, "its channels are the network's output")
    roots: dict[int, list[Port]] = {}
    for gid in range(len(groups.parent)):
        r = groups.find(gid)
        if groups.ports[r]:
            roots[r] = groups.ports[r]
    ordered = sorted(roots, key=lambda r: min(p.layer for p in roots[r] if p.port == "out")
                     if any(p.port == "out" for p in roots[r]) else -1)
    out_groups = []
    for k, r in enumerate(ordered):
        ports = sorted(set(roots[r]), key=lambda p: (p.layer, str(p.port)))
        prod = [p.layer for p in ports if p.port == "out"]
        name = module_name(layers[prod[0]].name) or layers[prod[0]].name if prod else f"group{k}"
        out_groups.append(ChannelGroup(k, name, groups.channels[r], ports, list(groups.blocked[r])))
    return out_groups


def kept_counts(channels: int, *, step: int | None = None, ratios: Sequence[float] | None = None) -> list[int]:
    """The kept channel counts of a table, largest first, the full width included: every
    ``step`` down from ``channels`` (at least 1 kept), or ``channels - floor(channels * r)``
    for each pruning ratio ``r`` in [0, 1)."""
    if (step is None) == (ratios is None):
        raise UserError("give a step or pruning ratios, not both")
    if step is not None:
        if step < 1:
            raise UserError(f"step must be >= 1, got {step}")
        out = list(range(channels, 0, -int(step)))
    else:
        bad = [r for r in ratios or () if not 0 <= r < 1]
        if bad:
            raise UserError(f"pruning ratios must be in [0, 1), got {bad[0]}")
        out = [channels - int(math.floor(channels * r)) for r in [0.0, *ratios]]
    return sorted({max(1, k) for k in out}, reverse=True)


# ---------------------------------------------------------------------- the model


@dataclass(frozen=True)
class LayerLatency:
    """One layer's latency in its network (milliseconds, calibration factor applied)."""

    ms: float
    #: metric -> (lower_ms, upper_ms) at the model's confidence
    intervals: dict[str, tuple[float, float]]
    c_in: int
    c_out: int
    out_of_design_space: bool
    flags: tuple[str, ...] = ()


#: Kept counts every this many channels, unless a table is asked for at pruning ratios
#: (NetAdapt's and HALP's grid: CPU kernels block channels by 4 to 16).
DEFAULT_STEP = 8

#: The CSV columns of :meth:`LatencyTable.to_csv`.
TABLE_COLUMNS = ("group", "group_name", "channels", "kept", "layer_index", "layer", "module", "type", "port",
                 "c_in", "c_out", "ms", "cm_lv_lo", "cm_lv_hi", "cm_o_lo", "cm_o_hi", "out_of_design_space", "flags")


class LatencyModel:
    """A pruner's latency oracle for one network on one device (see the module docstring).

    ``network`` is an ONNX model (path, bytes, ``ModelProto``) imported with the device's
    fusion rules, or an already imported :class:`~estimator.onnx_import.Network`."""

    def __init__(self, estimator: Estimator, network: Any, *, confidence: float = 0.9, input_shapes: Any = None,
                 name: str = "") -> None:
        self.estimator = estimator
        self.net = network if hasattr(network, "layers") else estimator.load_network(network, input_shapes)
        self.name = name or str(getattr(self.net, "name", "") or "")
        self.confidence = parse_confidence(confidence)[0]
        self.layers: list[Layer] = list(self.net.layers)
        self.groups = channel_groups(self.net)
        self.context = estimator.context_layers(self.layers)
        #: whether the network outgrows the cache, so its weight-bound layers run cold at any channel count
        self._cold = estimator.network_runs_cold([l for l in self.context if l is not None])
        self.base = estimator.estimate_network(self.net, self.confidence, per_layer=False)
        unc = self.base.uncalibrated
        #: calibrated total over the Eq. 7 total of the full network (1 when not calibrated)
        self.factor = float(self.base.total_ms / unc["total_ms"]) if unc and unc["total_ms"] > 0 else 1.0
        self._cache: dict[tuple[int, tuple[tuple[str, int], ...]], LayerLatency] = {}
        self._by_name: dict[str, int] = {}
        for i, l in enumerate(self.layers):
            self._by_name.setdefault(l.name, i)
            self._by_name.setdefault(module_name(l.name), i)
        #: the port (``"through"``, or the parameter of a token layout: ``"c"``, ``"h"``, ``"w"``)
        #: of each layer that keeps a group's channels
        self._through: dict[int, str] = {p.layer: str(p.port) for gr in self.groups for p in gr.ports
                                         if p.port in _KEEPING_PORTS}

    # ------------------------------------------------------------------ lookup
    def index(self, layer: int | str) -> int:
        """A layer's index from its index, ONNX node name or torch module name."""
        if isinstance(layer, int):
            if not 0 <= layer < len(self.layers):
                raise UserError(f"layer index {layer} out of range (0..{len(self.layers) - 1})")
            return layer
        if layer not in self._by_name:
            raise UserError(f"no layer {layer!r} in {self.name or 'the network'} (give an index, an ONNX node name "
                            f"or a module name such as {module_name(self.layers[0].name)!r})")
        return self._by_name[layer]

    def group(self, key: int | str) -> ChannelGroup:
        """A group by its index, its name (its first producer's module) or the ONNX node or
        module name of any of its producers."""
        if isinstance(key, int):
            if not 0 <= key < len(self.groups):
                raise UserError(f"channel group index {key} out of range (0..{len(self.groups) - 1})")
            return self.groups[key]
        for gr in self.groups:
            if gr.name == key:
                return gr
        i = self.index(key)
        for gr in self.groups:
            if i in gr.producers:
                return gr
        raise UserError(f"layer {key!r} produces no channel group")

    # ------------------------------------------------------------------ layers
    def layer(self, layer: int | str, *, c_in: int | None = None, c_out: int | None = None) -> LayerLatency:
        """One layer's latency in the network with ``c_in`` input and ``c_out`` output channels
        (a layer that keeps its channels takes either: the value of the parameter that holds
        them, which counts several entries per channel in MobileViT's unfolded patches); others
        as in the network. Cached."""
        return self.layers_at([(layer, c_in, c_out)])[0]

    def layers_at(self, queries: Iterable[tuple[int | str, int | None, int | None]]) -> list[LayerLatency]:
        """:meth:`layer` for many ``(layer, c_in, c_out)`` at once: the uncached ones in one
        batch (one estimator call costs about a millisecond however few layers it holds)."""
        free = LayerLatency(0.0, {m: (0.0, 0.0) for m in ("CM_TV", "CM_LV", "CM_O")}, 0, 0, False, ("free_on_device",))
        todo: list[tuple[int, dict[str, int]] | None] = []
        for layer, c_in, c_out in queries:
            i = self.index(layer)
            todo.append(None if self.context[i] is None else (i, self._at(i, c_in, c_out)))
        rows = iter(self._rows([t for t in todo if t is not None]))
        return [free if t is None else next(rows) for t in todo]

    __call__ = layer

    def _at(self, i: int, c_in: int | None, c_out: int | None) -> dict[str, int]:
        spec = SPECS[self.layers[i].type]
        flow = spec.channel_flow(self.layers[i].params)
        if flow == "mix":
            want = {"in": c_in, "out": c_out}
        elif flow in ("through", "flatten") or i in self._through:
            if c_in is not None and c_out is not None and c_in != c_out:
                raise UserError(f"{self.layers[i].type} layer {self.layers[i].name} keeps its channels: "
                                f"c_in {c_in} != c_out {c_out}")
            want = {self._through.get(i, flow): c_in if c_in is not None else c_out}
        elif c_in is None and c_out is None:
            want = {}
        else:
            raise UserError(f"{self.layers[i].type} layer {self.layers[i].name} has no channel counts to set")
        return {k: int(v) for k, v in want.items() if v is not None}

    def _layer_with(self, i: int, channels: Mapping[str | int, int]) -> Layer:
        """Layer ``i`` with ``channels`` at its ports, in its network's context (cold when the
        network outgrows the cache and the layer is weight-bound at these channels)."""
        base = self.layers[i]
        spec = SPECS[base.type]
        p = dict(base.params)
        for port, n in channels.items():
            if n < 1:
                raise UserError(f"{base.type} layer {base.name}: {n} channels at {port!r}")
            p = spec.with_channels(p, port, n)
        layer = dataclasses.replace(base, params=p, counts=describe(base.type, p))
        return self.estimator.as_cold(layer) if self._cold else layer

    def _rows(self, todo: Sequence[tuple[int, Mapping[str | int, int]]]) -> list[LayerLatency]:
        """Latencies of layers ``i`` with channels at ports, cached, uncached ones in one batch."""
        keys = [(i, tuple(sorted((str(k), int(v)) for k, v in ch.items()))) for i, ch in todo]
        miss = [(k, i, ch) for k, (i, ch) in zip(keys, todo) if k not in self._cache]
        if miss:
            uniq = {k: (i, ch) for k, i, ch in miss}
            layers = [self._layer_with(i, ch) for i, ch in uniq.values()]
            rows = self.estimator.estimate_layers(layers, self.confidence)
            for k, (i, _), l, r in zip(uniq, uniq.values(), layers, rows):
                self._cache[k] = self._latency(i, l, r)
        return [self._cache[k] for k in keys]

    def _latency(self, i: int, layer: Layer, row: LayerEstimate) -> LayerLatency:
        f = self.factor
        c = self.confidence
        iv = {m: (per[c][0] * f, per[c][1] * f) for m, per in row.intervals.items()}
        spec, p = SPECS[layer.type], layer.params
        if spec.channel_flow(p) == "mix":
            c_in, c_out = spec.channels_at(p, "in"), spec.channels_at(p, "out")
        elif i in self._through:
            c_in = c_out = spec.channels_at(p, self._through[i])
        else:
            feats = layer.features
            c_in = int(feats.get("c_in", feats.get("c", 0)))
            c_out = int(feats.get("c_out", feats.get("c", 0)))
        return LayerLatency(float(row.prediction_ms) * f, iv, c_in, c_out, bool(row.out_of_design_space),
                            tuple(row.flags))

    # ----------------------------------------------------------------- pruning
    def _deltas(self, kept: Mapping[int | str, int]) -> dict[int, dict[str | int, int]]:
        """Each touched layer's channels per port when groups keep ``kept`` channels."""
        delta: dict[int, dict[str | int, int]] = {}
        seen: dict[int, int] = {}
        for key, k in kept.items():
            gr = self.group(key)
            if gr.index in seen:  # one group under two keys (an index and a name): count it once
                if seen[gr.index] != int(k):
                    raise UserError(f"channel group {gr.name} is given twice: {seen[gr.index]} and {k} kept")
                continue
            seen[gr.index] = int(k)
            if not gr.prunable:
                raise UserError(f"channel group {gr.name} cannot be pruned: {'; '.join(gr.blocked) or 'no producer'}")
            if not 1 <= int(k) <= gr.channels:
                raise UserError(f"channel group {gr.name} keeps 1..{gr.channels} channels, got {k}")
            d = gr.channels - int(k)
            for p in gr.ports:
                per = delta.setdefault(p.layer, {})
                per[p.port] = per.get(p.port, 0) + d * p.mult
        out: dict[int, dict[str | int, int]] = {}
        for i, per in delta.items():
            spec = SPECS[self.layers[i].type]
            out[i] = {port: spec.channels_at(self.layers[i].params, port) - d for port, d in per.items()}
        return out

    def group_ms(self, group: int | str, kept: int, state: Mapping[int | str, int] | None = None) -> float:
        """The summed latency of the layers ``group`` touches when it keeps ``kept`` channels
        and the other groups keep what ``state`` says (default: all)."""
        gr = self.group(group)
        full = dict(state or {})
        full[gr.index] = kept
        ch = self._deltas({**{self.group(k).index: v for k, v in full.items()}})
        todo = [(i, ch.get(i, {})) for i in gr.layers if self.context[i] is not None]
        return float(sum(r.ms for r in self._rows(todo)))

    def pruned_layers(self, kept: Mapping[int | str, int]) -> list[Layer]:
        """The network's layers (as imported, before the device's context) when groups keep
        ``kept`` channels."""
        out = list(self.layers)
        for i, ch in self._deltas(kept).items():
            spec = SPECS[out[i].type]
            p = dict(out[i].params)
            for port, n in ch.items():
                p = spec.with_channels(p, port, n)
            out[i] = dataclasses.replace(out[i], params=p, counts=describe(out[i].type, p))
        return out

    def estimate(self, kept: Mapping[int | str, int] | None = None, confidence: Any = None) -> NetworkEstimate:
        """The pruned network's estimate, calibrated as ``estimator predict`` calibrates it."""
        net = SimpleNamespace(layers=self.pruned_layers(kept or {}), warnings=list(getattr(self.net, "warnings", [])),
                              free_nodes=dict(getattr(self.net, "free_nodes", {}) or {}), name=self.name)
        return self.estimator.estimate_network(net, self.confidence if confidence is None else confidence,
                                               per_layer=False)

    # ------------------------------------------------------------------- table
    def table(self, *, step: int | None = None, ratios: Sequence[float] | None = None, monotone: bool = False,
              progress: Callable[[int, int], None] | None = None) -> "LatencyTable":
        """The latency table (see :class:`LatencyTable`): kept counts every ``step`` channels
        (default :data:`DEFAULT_STEP`) or at pruning ``ratios``. The step counts the
        producers' output channels: a group whose channels are an attention's heads (each many
        of its projection's outputs) is tabled head by head."""
        if step is None and ratios is None:
            step = DEFAULT_STEP
        base_todo = [(i, {}) for i in range(len(self.layers)) if self.context[i] is not None]
        base = dict(zip([i for i, _ in base_todo], self._rows(base_todo)))
        prunable = [gr for gr in self.groups if gr.prunable]
        todo: list[tuple[ChannelGroup, int, int, dict[str | int, int]]] = []
        for gr in prunable:
            for k in kept_counts(gr.channels, step=max(1, step // gr.unit) if step else None, ratios=ratios):
                ch = self._deltas({gr.index: k})
                todo += [(gr, k, i, ch.get(i, {})) for i in gr.layers if self.context[i] is not None]
        rows: list[LayerLatency] = []
        chunk = 2048
        for s in range(0, len(todo), chunk):
            rows += self._rows([(i, ch) for _, _, i, ch in todo[s:s + chunk]])
            if progress is not None:
                progress(min(s + chunk, len(todo)), len(todo))
        entries: dict[tuple[int, int], list[tuple[int, LayerLatency]]] = {}
        for (gr, k, i, _), r in zip(todo, rows):
            entries.setdefault((gr.index, k), []).append((i, r))
        if monotone:
            _make_monotone(entries)
        return LatencyTable(self, base, entries, step=step, ratios=list(ratios) if ratios is not None else None,
                            monotone=monotone)


def _make_monotone(entries: dict[tuple[int, int], list[tuple[int, LayerLatency]]]) -> None:
    """Each layer's latency made non-increasing as its group keeps fewer channels: the running
    minimum from the full width down, of the point and of each interval end apart. A row whose
    point would cost more than a wider row's takes that point and the flag ``monotone_from:K``
    (``monotone`` where only an interval end changed): ``K`` is a channel count that has the
    point, so a pruner can round up to it. Isotonic regression was not taken: it averages a
    depthwise conv's measured 7x step into values no channel count has."""
    by_layer: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for (g, k), rows in entries.items():
        for j, (i, _) in enumerate(rows):
            by_layer.setdefault((g, i), []).append((k, j))
    for (g, _), ks in by_layer.items():
        point: tuple[int, float] | None = None
        ends: dict[str, tuple[float, float]] = {}
        for k, j in sorted(ks, reverse=True):
            i, r = entries[(g, k)][j]
            if point is None or r.ms <= point[1]:
                point = (k, r.ms)
            ends = {m: (min(lo, ends[m][0]), min(hi, ends[m][1])) if m in ends else (lo, hi)
                    for m, (lo, hi) in r.intervals.items()}
            if point[1] < r.ms or ends != r.intervals:
                flag = f"monotone_from:{point[0]}" if point[1] < r.ms else "monotone"
                entries[(g, k)][j] = (i, dataclasses.replace(r, ms=point[1], intervals=dict(ends),
                                                             flags=(*r.flags, flag)))


# ---------------------------------------------------------------------- the table


@dataclass
class LatencyTable:
    """A network's latency table on one device (milliseconds).

    ``base``: every layer the device estimates, at full width (their ``ms`` sum to the
    network's estimate). ``entries[(group, kept)]``: the layers group ``group`` touches when it
    keeps ``kept`` channels (the others at full width), each with ``c_in``/``c_out`` there."""

    model: LatencyModel
    base: dict[int, LayerLatency]
    entries: dict[tuple[int, int], list[tuple[int, LayerLatency]]]
    step: int | None = None
    ratios: list[float] | None = None
    monotone: bool = False

    @property
    def total_ms(self) -> float:
        return float(sum(r.ms for r in self.base.values()))

    def group_ms(self, group: int, kept: int) -> float:
        return float(sum(r.ms for _, r in self.entries[(group, kept)]))

    def saved_ms(self, group: int, kept: int) -> float:
        """Latency saved when ``group`` keeps ``kept`` channels (the others at full width)."""
        full = self.model.groups[group].channels
        return self.group_ms(group, full) - self.group_ms(group, kept)

    def _row(self, g: ChannelGroup | None, kept: int | None, i: int, r: LayerLatency, port: Any) -> dict[str, Any]:
        l = self.model.layers[i]
        return {"group": "" if g is None else g.index, "group_name": "" if g is None else g.name,
                "channels": "" if g is None else g.channels, "kept": "" if kept is None else kept,
                "layer_index": i, "layer": l.name, "module": module_name(l.name), "type": l.type, "port": port,
                "c_in": r.c_in, "c_out": r.c_out, "ms": r.ms,
                "cm_lv_lo": r.intervals["CM_LV"][0], "cm_lv_hi": r.intervals["CM_LV"][1],
                "cm_o_lo": r.intervals["CM_O"][0], "cm_o_hi": r.intervals["CM_O"][1],
                "out_of_design_space": int(r.out_of_design_space), "flags": ";".join(r.flags)}

    def rows(self) -> Iterable[dict[str, Any]]:
        """The CSV rows (:data:`TABLE_COLUMNS`): the full-width layers (empty ``group``), then
        each group's kept counts, largest first."""
        for i, r in self.base.items():
            yield self._row(None, None, i, r, "")
        for (g, k), rows in self.entries.items():
            gr = self.model.groups[g]
            ports = {p.layer: p.port for p in gr.ports}
            for i, r in rows:
                yield self._row(gr, k, i, r, ports.get(i, ""))

    def to_csv(self, out: str | Path | io.TextIOBase) -> None:
        def write(f: Any) -> None:
            w = csv.DictWriter(f, fieldnames=TABLE_COLUMNS)
            w.writeheader()
            for row in self.rows():
                w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})

        if isinstance(out, (str, Path)):
            with open(out, "w", newline="") as f:
                write(f)
        else:
            write(out)

    def to_dict(self) -> dict[str, Any]:
        m = self.model
        est = m.estimator
        groups = []
        for gr in m.groups:
            d = gr.to_dict(m.layers)
            if gr.prunable:
                ks = sorted({k for g, k in self.entries if g == gr.index}, reverse=True)
                d["entries"] = [{"kept": k, "ms": self.group_ms(gr.index, k), "saved_ms": self.saved_ms(gr.index, k),
                                 "layers": [{kk: v for kk, v in self._row(gr, k, i, r, "").items()
                                             if kk not in ("group", "group_name", "channels", "kept", "port")}
                                            for i, r in self.entries[(gr.index, k)]]} for k in ks]
            groups.append(d)
        return {"network": m.name, "device": est.device, "confidence": m.confidence,
                "calibration_factor": m.factor, "total_ms": self.total_ms,
                "estimate": {"total_ms": m.base.total_ms,
                             "intervals": {k: list(v[m.confidence]) for k, v in m.base.intervals.items()}},
                "step": self.step, "ratios": self.ratios, "monotone": self.monotone,
                "layers": [{kk: v for kk, v in self._row(None, None, i, r, "").items()
                            if kk not in ("group", "group_name", "channels", "kept", "port")}
                           for i, r in self.base.items()],
                "groups": groups}

    def to_json(self, out: str | Path | io.TextIOBase) -> None:
        text = json.dumps(self.to_dict(), indent=1)
        if isinstance(out, (str, Path)):
            Path(out).write_text(text + "\n")
        else:
            out.write(text + "\n")


# ------------------------------------------------------------------- entry points


def latency_table(model: Any, device: str | Estimator, *, step: int | None = None,
                  ratios: Sequence[float] | None = None, monotone: bool = False, confidence: float = 0.9,
                  input_shapes: Any = None, profiles: str | Path | None = None,
                  progress: Callable[[int, int], None] | None = None) -> LatencyTable:
    """The latency table of ``model`` (an ONNX path, bytes or ``ModelProto``, or an imported
    network) on ``device`` (a profile name or an :class:`Estimator`): what ``estimator lut``
    writes."""
    est = device if isinstance(device, Estimator) else Estimator.from_profile(device, root=profiles)
    name = Path(model).stem if isinstance(model, (str, Path)) else ""
    lm = LatencyModel(est, model, confidence=confidence, input_shapes=input_shapes, name=name)
    return lm.table(step=step, ratios=ratios, monotone=monotone, progress=progress)


def estimate_module(module: Any, input_shape: Sequence[int], device: str | Estimator = "host-cpu", *,
                    confidence: Any = 0.9, profiles: str | Path | None = None) -> NetworkEstimate:
    """Estimate a ``torch.nn.Module`` on ``device``: exported to ONNX (eval mode, batch norm
    folded by the exporter) for ``input_shape``, then estimated as ``estimator predict`` does."""
    from .zoo import export_onnx  # noqa: PLC0415 (torch only when a module is given)

    est = device if isinstance(device, Estimator) else Estimator.from_profile(device, root=profiles)
    was = module.training
    try:
        data = export_onnx(module, input_shape=input_shape)
    finally:
        module.train(was)
    return est.estimate_network(data, confidence, name=type(module).__name__)
