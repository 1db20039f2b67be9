"""The layer-type registry: one :class:`LayerTypeSpec` subclass per module of this package.

A layer type owns everything about itself in its module: its features and counts
(:meth:`~LayerTypeSpec.count`), its ONNX operators and patterns
(:attr:`~LayerTypeSpec.onnx_ops`, :meth:`~LayerTypeSpec.from_onnx`), its smart-padding layer
under measurement (:meth:`~LayerTypeSpec.lum_inputs`, :meth:`~LayerTypeSpec.lum_ops`, and the
rendering of IR ops of its own kind: :meth:`~LayerTypeSpec.onnx_nodes`,
:meth:`~LayerTypeSpec.tflite_ops`), its sampling draws and network prior
(:meth:`~LayerTypeSpec.draw`, :meth:`~LayerTypeSpec.prior_variant`,
:attr:`~LayerTypeSpec.prior_acts`), and which activation it takes fused. Modules register
their type with :func:`register`; importing the package imports every module of it
(:func:`discover`), so a new type is one new module. The ONNX importer, ``bench.modelgen``,
``bench.sampling`` and the estimator loop over :data:`SPECS` and :data:`ONNX_OPS` and never
name a type.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

from .ir import Op
from .params import LayerSpecError, integer, rows_chw
from .space import MAX_ROW_ELEMS, SPACE_MAX, UnitHash

__all__ = [
    "ChannelAxis",
    "doubled_port",
    "rows_carry",
    "LayerType",
    "LayerTypeSpec",
    "LayerCounts",
    "Layer",
    "NCHW",
    "rows_of",
    "reshape_op",
    "register",
    "SPECS",
    "ONNX_OPS",
]

#: An NCHW shape.
NCHW = tuple[int, int, int, int]


class LayerType:
    """String constants for the layer types that code outside their module names (a type
    module needs no entry here)."""

    CONV2D = "conv2d"
    DWCONV2D = "dwconv2d"
    FC = "fc"
    MATMUL = "matmul"
    MAXPOOL = "maxpool"
    AVGPOOL = "avgpool"
    GLOBALPOOL = "globalpool"
    ADD = "add"
    MUL = "mul"
    CONCAT = "concat"
    ACTIVATION = "activation"
    RESIZE = "resize"
    PAD = "pad"
    SLICE = "slice"
    TRANSPOSE = "transpose"
    RESHAPE = "reshape"
    SOFTMAX = "softmax"
    OTHER = "other"


@dataclass(frozen=True)
class ChannelAxis:
    """Where ``size`` channels lie in a tensor: along ``axis``, each spanning ``inner``
    consecutive entries of it, the axis ``outer x size x inner`` long (a feature map's channel
    axis: ``inner`` 1; MobileViT's unfolding of ``(1, c, h, w)`` into ``(c h/2, 2, w/2, 2)``:
    axis 0, ``inner`` h/2)."""

    axis: int
    size: int
    inner: int = 1

    def moved(self, axis: int) -> "ChannelAxis":
        return ChannelAxis(axis, self.size, self.inner)


def doubled_port(p: Mapping[str, Any], read: Callable[[Sequence[int]], Sequence[int]], in_shape: Sequence[int],
                 at: ChannelAxis) -> str | None:
    """The raw parameter (``c``, ``h`` or ``w``) that holds the channels ``at`` places in the
    input, for a layer whose parameters ``read`` gives from its input shape (``(c, h, w, ...)``):
    the one that alone doubles when they double; None where none does."""
    wider = [int(x) for x in in_shape]
    wider[at.axis] *= 2
    a, b = read(in_shape), read(wider)
    diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    if len(diff) != 1 or diff[0] > 2 or b[diff[0]] != 2 * a[diff[0]]:
        return None
    name = "chw"[diff[0]]
    return name if int(p.get(name, 0)) == a[diff[0]] else None


def rows_carry(p: Mapping[str, Any], in_shape: Sequence[int], at: ChannelAxis,
               out: ChannelAxis | None = None) -> tuple[str, ChannelAxis] | None:
    """:meth:`LayerTypeSpec.carries` of a layer whose parameters are its input read as rows
    (:func:`~estimator.layers.params.rows_chw`): the parameter that doubles with the channels
    ``at`` places (``c`` where a leading axis folds into it: MobileViT's patches times heads),
    and ``out`` (default ``at``: the same place) where the output holds them."""
    port = doubled_port(p, rows_chw, in_shape, at)
    return None if port is None else (port, at if out is None else out)


@dataclass(frozen=True)
class LayerCounts:
    """What :meth:`LayerTypeSpec.count` derives from raw parameters."""

    features: dict[str, float]
    macs: int
    params: int
    ops: float
    bytes: int
    output_shape: tuple[int, ...]


class LayerTypeSpec:
    """One layer type. Subclass it in the type's own module and decorate with :func:`register`.

    Conventions: ``ops`` is ``2 * MACs`` for compute layers, output elements x window for
    pools and elements moved for memory-bound layers; ``bytes`` is (input + output elements
    + parameters) x element size; batch ``n`` multiplies MACs, ops and bytes but is not a
    feature (profiles are benchmarked at batch 1).
    """

    #: The type's name (raw ``type`` of a layer, a profile row, the proto's LayerSpec).
    name: ClassVar[str]
    #: Position in :data:`LAYER_TYPES` (which orders listings and plans).
    order: ClassVar[int]
    #: The feature vector the models see, in order.
    features: ClassVar[tuple[str, ...]]
    #: ``"flops"``, ``"window-ops"`` or ``"elements"``: what ``ops`` (Eq. 7's divisor) counts.
    ops_unit: ClassVar[str]
    summary: ClassVar[str]
    #: Raw parameters that must be given (others have defaults).
    required: ClassVar[tuple[str, ...]] = ()
    #: Raw parameters that count channels (:meth:`zero_channels`).
    channel_params: ClassVar[tuple[str, ...]] = ("c",)
    #: Whether smart padding can measure the type (its inputs and output are NCHW tensors a
    #: 1x1 padding conv can feed and consume): then :meth:`lum_ops` builds it.
    benchable: ClassVar[bool] = False
    #: Model formats the LUM renders to (``bench.modelgen.to_onnx``; ``bench.tflite_models``):
    #: the IR primitives render to both; an op of the type's own kind through
    #: :meth:`onnx_nodes` and :meth:`tflite_ops`.
    model_formats: ClassVar[tuple[str, ...]] = ("onnx", "tflite")
    #: What keeps some configurations of a rendered format from rendering (:meth:`renders`), in
    #: words for the error that names such a configuration.
    render_limits: ClassVar[str] = ""
    #: Whether the type takes a fused activation (raw param ``act``, feature ``act``): the
    #: producers that device fusion rules may fold an activation into.
    takes_act: ClassVar[bool] = False
    #: Runtime (a profile's runner: ``onnxruntime``, ``litert``, ``vela``) -> the activation
    #: kinds that runtime runs inside this type's kernel: the type's part of the runtime's
    #: default fusion rules (``bench.profile_db.runtime_fusion``, which says why per runtime).
    #: A runtime not named fuses nothing into the type.
    fused_activations: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: The fused activation of the benchmarked LUM when a row names none (Table 2 of the
    #: paper: conv2d, dwconv2d and add carry a ReLU, fc and mul none).
    lum_default_act: ClassVar[str | None] = None
    #: Example raw parameters (the generic model-generator tests build and run each one).
    examples: ClassVar[tuple[dict[str, Any], ...]] = ()
    #: Network prior: fused activations of the LUM with their shares; the first is the
    #: LUM's default and leaves ``act`` out (``bench.sampling``).
    prior_acts: ClassVar[tuple[tuple[str | None, float], ...]] = ()

    # ------------------------------------------------------------------ counts

    def brief(self, p: Mapping[str, Any]) -> str | None:
        """A short human-readable summary of raw parameters ``p`` (``estimator layers``), or
        None: the listing then shows the layer's input shape."""
        return None

    def count(self, p: dict[str, Any], elem_bytes: int) -> LayerCounts:
        """Features, MACs, parameters, ops, bytes and output shape from raw parameters;
        :class:`LayerSpecError` for a missing parameter or an impossible configuration. It
        reads (and checks) every raw parameter the type takes, those no count depends on
        included (an op's constants, a mode): a key it never reads is refused in a layer spec
        (:func:`estimator.layers.describe_strict`)."""
        raise NotImplementedError

    def zero_channels(self, p: Mapping[str, Any]) -> bool:
        """Whether the configuration has no channels: one of its :attr:`channel_params` is
        0, none is negative and every :attr:`required` parameter is given. Such a layer (one
        a pruning tool pruned away) does no work: a batch of layer configurations answers it
        with 0 ms, flagged ``zero_channels`` (``estimator.inprocess.batch_items``). Negative
        channels, missing parameters and whatever else :meth:`count` refuses stay its errors."""
        chans = [integer(p, k) for k in self.channel_params if p.get(k) is not None]
        return 0 in chans and min(chans) >= 0 and all(p.get(k) is not None for k in self.required)

    # ----------------------------------------------------------- smart padding

    def renders(self, p: Mapping[str, Any], model_format: str) -> bool:
        """Whether this configuration's LUM renders to ``model_format`` (default: the type's
        :attr:`model_formats`)."""
        return model_format in self.model_formats

    def lum_inputs(self, p: Mapping[str, Any], counts: LayerCounts,
                   model_format: str = "onnx") -> tuple[NCHW, ...]:
        """NCHW shapes of the LUM's inputs (default: one ``(1, c, h, w)``) in a model of
        ``model_format`` (token tensors are padded as :func:`rows_of` lays them out there)."""
        return ((1, int(p["c"]), int(p["h"]), int(p["w"])),)

    def lum_output(self, p: Mapping[str, Any], counts: LayerCounts, model_format: str = "onnx") -> NCHW:
        """NCHW shape of the LUM's output (default: the counted output shape)."""
        out = counts.output_shape
        return int(out[0]), int(out[1]), int(out[2]), int(out[3])

    def lum_ops(self, p: Mapping[str, Any], ins: Sequence[str], out_shape: NCHW, out_name: str,
                act: str | None, *, single: bool = False, model_format: str = "onnx") -> list[Op]:
        """The LUM as model-IR ops reading tensors ``ins`` and writing ``out_name``;
        ``act`` is its fused activation; ``single``: the single-layer model (Fig. 5a);
        ``model_format``: the format the model is rendered to (the layout of its inputs)."""
        raise LayerSpecError(f"no model builder for {self.name!r}")

    def op_weights(self, op: Op, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Weights of an IR op of the type's own kind (``op.kind == name``), e.g. a layer
        norm's scale and bias; ``bench.modelgen.make_weights`` draws them, seeded."""
        return {}

    def tflite_ops(self, op: Op, ins: Sequence[Any], weights: Mapping[str, np.ndarray]) -> Any:
        """TensorFlow ops computing an IR op of the type's own kind from the TensorFlow tensors
        ``ins``; returns the output tensor. ``bench.tflite_models`` calls it inside the op's
        name scope and converts the graph to TFLite, so this is the TFLite rendering. Tensors
        of rank 4 are NHWC there (:func:`~estimator.layers.ir.tf_axis` maps an IR axis), others
        keep the IR's shape; the LUM of a ``model_format="tflite"`` model is built so that the
        axis it works on is TensorFlow's last one."""
        raise LayerSpecError(f"IR op kind {op.kind!r} has no TFLite rendering")

    def onnx_nodes(self, op: Op, output: str, weights: Mapping[str, np.ndarray], init: Any) -> list[Any]:
        """ONNX nodes of an IR op of the type's own kind, reading ``op.inputs`` and writing
        ``output``; ``init(name, array)`` adds an initializer and returns its name. The
        model-IR primitives (conv, gemm, pools, element-wise, act, ...) are rendered by
        ``bench.modelgen``; a type whose LUM needs another operator renders it here."""
        raise LayerSpecError(f"IR op kind {op.kind!r} has no ONNX rendering")

    def single_layer_io(self, p: Mapping[str, Any], ins: tuple[NCHW, ...], out: NCHW,
                        model_format: str = "onnx") -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
        """Graph input and output shapes of the single-layer model (default: the LUM's)."""
        return ins, out

    def reads_graph_input(self, p: Mapping[str, Any]) -> bool:
        """Whether the LUM reads the network's input (its padded model has no input side)."""
        return False

    #: Whether the type's cost depends on which of its inputs another layer reads too, or no
    #: layer writes (raw param ``shared``: those inputs' indices, which the importer sets from
    #: the network's layers and :meth:`shared_inputs` returns); concat: an NPU compiler writes
    #: a producer with no other reader straight into the concatenation and copies the others.
    tracks_shared_inputs: ClassVar[bool] = False
    #: Whether the type's output is a view or a part of its input (a reshape, a slice or a
    #: split's part): no layer computes it, so a concatenation reading it copies it.
    output_is_view: ClassVar[bool] = False

    def n_inputs(self, p: Mapping[str, Any]) -> int:
        """How many activation inputs the layer reads (default 1)."""
        return 1

    def with_shared_inputs(self, p: Mapping[str, Any], shared: Sequence[bool]) -> dict[str, Any]:
        """``p`` with raw param ``shared`` set from the importer's flag per activation input
        (one per input the layer reads, in order); ``p`` as it is where the type does not
        track shared inputs, none is flagged, or the flags do not match :meth:`n_inputs` (a
        constant input, which no layer writes either, is not among the activation inputs)."""
        idx = [i for i, f in enumerate(shared) if f]
        if not self.tracks_shared_inputs or not idx or len(shared) != self.n_inputs(p):
            return dict(p)
        return {**p, "shared": idx}

    def with_flags(self, p: Mapping[str, Any], flags: Sequence[str]) -> dict[str, Any]:
        """``p`` with the raw params that the importer's flags on the layer imply (default:
        none; element-wise ops: ``const_operand`` -> ``const_b``). The importer calls it once
        per layer, for both of its paths."""
        return dict(p)

    def shared_inputs(self, p: Mapping[str, Any]) -> tuple[int, ...]:
        """The inputs another layer also reads or no layer writes (raw param ``shared``:
        indices, a list or "0,2"); the padded model gives each of them a second reader
        (``bench.modelgen.padded_model``)."""
        if not self.tracks_shared_inputs or p.get("shared") in (None, "", []):
            return ()
        raw = p["shared"]
        items = raw.replace(",", " ").split() if isinstance(raw, str) else list(raw)
        try:
            idx = tuple(sorted({int(i) for i in items}))
        except (TypeError, ValueError):
            raise LayerSpecError(f"shared must list input indices, got {raw!r}") from None
        if idx and idx[0] < 0:
            raise LayerSpecError(f"shared must list input indices >= 0, got {raw!r}")
        return idx

    # --------------------------------------------------------- channel pruning

    #: The raw parameter holding the channels of a layer that keeps its input's channels
    #: (``"c"``: depthwise convs, pools, element-wise ops, activations); ``""``: none.
    through_channels: ClassVar[str] = ""

    def channel_flow(self, p: Mapping[str, Any]) -> str:
        """How this configuration carries channels that a pruner removes
        (:mod:`estimator.pruning`): ``"mix"`` reads every input channel and writes channels of
        its own (ports ``"in"`` and ``"out"``: a dense conv, an fc), ``"through"`` keeps its
        input's channels (port ``"through"``, or ``"w"`` for token rows ``(1, rows, 1,
        channels)``; :meth:`carries` names the parameter of other layouts), ``"concat"`` joins
        its inputs' (ports 0, 1, ...),
        ``"flatten"`` folds channels into features; ``""``: it reads channels in a way pruning
        cannot follow (attention, grouped convs), which keeps their group whole."""
        return "through" if self.through_channels else ""

    def carries(self, p: Mapping[str, Any], node: Any, in_shape: Sequence[int], out_shape: Sequence[int],
                at: ChannelAxis) -> tuple[str, ChannelAxis] | None:
        """Where a layer that :meth:`channel_flow` does not follow (a reshape or transpose between
        layouts, a layer norm, a concat or gather along the tokens) carries the channels that
        ``at`` places in its input ``in_shape``: ``(port, where they are in the output)``, the
        port being the raw parameter that holds them, a multiple of their count (``"c"``,
        ``"h"``, ``"w"``, or ``"b"`` for a batch of products); None where it does not, which
        keeps their group whole. ``node`` is the layer's main ONNX node. This is how a
        transformer's width runs from a convolution through the token layout (a patch
        embedding, MobileViT's unfolding) and back, and how attention's heads run from the
        q/k/v projection to the output projection. A reshape that splits the channels over
        several axes returns a ``ChannelAxis`` of another ``size``: the group's channels
        become that axis' entries (:mod:`estimator.pruning`)."""
        return None

    def _channel_key(self, port: str | int) -> str:
        key = {"in": "c_in", "out": "c_out", "through": self.through_channels, "flatten": self.through_channels,
               "c": "c", "h": "h", "w": "w", "b": "b"}.get(port) if isinstance(port, str) else None
        if not key:
            raise LayerSpecError(f"layer type {self.name!r} has no channel port {port!r}")
        return key

    def channels_at(self, p: Mapping[str, Any], port: str | int) -> int:
        """The channel count at ``port`` (see :meth:`channel_flow`)."""
        return int(p[self._channel_key(port)])

    def with_channels(self, p: Mapping[str, Any], port: str | int, n: int) -> dict[str, Any]:
        """A copy of raw parameters ``p`` with ``n`` channels at ``port``."""
        return {**p, self._channel_key(port): int(n)}

    # ------------------------------------------------------------------- ONNX

    #: ONNX operators (default domain) whose nodes :meth:`from_onnx` turns into layers.
    onnx_ops: ClassVar[tuple[str, ...]] = ()
    #: ONNX operators at which a multi-node pattern of this type starts although another
    #: type claims the operator (GELU starts at a Div): :meth:`from_onnx` is asked first
    #: there, and returns None where the pattern does not match.
    onnx_patterns: ClassVar[tuple[str, ...]] = ()

    def from_onnx(self, n: Any, g: Any) -> Any:
        """The :class:`~estimator.layers.importing.Draft` of ONNX node ``n`` (one of
        :attr:`onnx_ops`), read through ``g`` (an
        :class:`~estimator.layers.importing.ImportContext`); None: not a node of this type."""
        return None

    # ---------------------------------------------------------------- sampling

    #: Whether :meth:`draw` is implemented (the type is part of sampling plans).
    sampled: ClassVar[bool] = False

    def draw(self, r: np.random.Generator, prior: bool) -> dict[str, Any]:
        """Raw parameters drawn from the broad space or (``prior``) the network prior."""
        raise LayerSpecError(f"no sampler for layer type {self.name!r}")

    def prior_variant(self, p: dict[str, Any], unit: UnitHash) -> dict[str, Any]:
        """The network prior's type-specific variant of a drawn configuration (off-ladder
        channels, groups), chosen by ``unit`` (a hash of the configuration), not by the
        generator: a configuration that keeps its draw keeps its key."""
        return p

    def in_ranges(self, p: Mapping[str, Any], ins: Sequence[tuple[int, ...]], out: tuple[int, ...]) -> bool:
        """Whether a valid configuration lies inside the broad space (:data:`SPACE_MAX`)."""
        return self._in_ranges(p, ins, out, [s[1] for s in (*ins, out)])

    @staticmethod
    def _rows_in_ranges(shapes: Sequence[tuple[int, ...]]) -> bool:
        """:meth:`in_ranges` of a type whose LUM tensors are :func:`rows_of` rows: each within
        :data:`~estimator.layers.space.MAX_ROW_ELEMS` elements, whatever its rows and their
        length (a map's channel and width caps would leave out the token layouts of DeiT's
        q/k/v slices and MobileViT's patches)."""
        return all(int(np.prod(s)) <= MAX_ROW_ELEMS for s in shapes)

    @staticmethod
    def _in_ranges(p: Mapping[str, Any], ins: Sequence[tuple[int, ...]], out: tuple[int, ...],
                   chans: Sequence[int]) -> bool:
        if max(max(s[2], s[3]) for s in (*ins, out)) > SPACE_MAX["hw"]:
            return False
        if max(chans) > SPACE_MAX["c"]:
            return False
        if max(int(p.get(k) or 1) for k in ("k_h", "k_w")) > SPACE_MAX["k"]:
            return False
        if max(int(p.get(k) or 1) for k in ("s_h", "s_w")) > SPACE_MAX["s"]:
            return False
        return max(int(p.get(k) or 1) for k in ("d_h", "d_w")) <= SPACE_MAX["dilation"]

    def __repr__(self) -> str:
        return f"<layer type {self.name}>"


def rows_of(shape: Sequence[int], model_format: str = "onnx") -> NCHW:
    """A tensor as smart padding feeds it: its ``lead = prod(leading dims)`` rows of ``last``
    elements, the same contiguous data, reshaped (a view) to the shape the layer reads.

    ONNX (NCHW): ``(1, lead, 1, last)``, many channels. 1x1 padding convs are cheap per
    element with many channels and dear with few (ONNX Runtime: 15 ns per element at 1
    channel, 0.7 ns at 64). TFLite (NHWC): ``(1, last, 1, lead)``, stored as NHWC
    ``(1, 1, lead, last)``: ``lead`` pixels of ``last`` channels is the row-major token tensor,
    where ``(1, lead, 1, last)`` would store it transposed and charge a TRANSPOSE to the LUM."""
    s = [int(x) for x in shape]
    lead = 1
    for x in s[1:-1] if len(s) > 1 else ():
        lead *= x
    return (1, s[-1], 1, lead) if model_format == "tflite" else (1, lead, 1, s[-1])


def reshape_op(name: str, src: str, dst: str, shape: Sequence[int]) -> Op:
    """A reshape glue op of a LUM (role ``aux``: a view, counted in the padded model's time)
    between a :func:`rows_of` tensor and the shape the layer reads. It reshapes the data in
    the order the model stores it (``stored_order``: NHWC for rank 4 in TFLite), which is
    what makes it a view there too."""
    return Op("reshape", name, (src,), dst, tuple(int(x) for x in shape), {"stored_order": True}, None, "aux")


#: The vocabulary, by type name, in :attr:`LayerTypeSpec.order` (filled by :func:`discover`).
SPECS: dict[str, LayerTypeSpec] = {}
#: ONNX operator -> the types claiming it, in order (filled by :func:`discover`).
ONNX_OPS: dict[str, tuple[LayerTypeSpec, ...]] = {}
_REGISTERED: list[LayerTypeSpec] = []


def register(cls: type[LayerTypeSpec]) -> type[LayerTypeSpec]:
    """Class decorator: add the type to the registry."""
    if any(s.name == cls.name for s in _REGISTERED):
        raise RuntimeError(f"layer type {cls.name!r} registered twice")
    _REGISTERED.append(cls())
    return cls


def discover() -> None:
    """Import every module of this package (each type module registers its type), then
    fill :data:`SPECS` in :attr:`LayerTypeSpec.order`."""
    for mod in pkgutil.iter_modules([str(Path(__file__).parent)]):
        importlib.import_module(f"{__package__}.{mod.name}")
    SPECS.clear()
    ONNX_OPS.clear()
    ordered = sorted(_REGISTERED, key=lambda s: (s.order, s.name))
    for s in ordered:
        SPECS[s.name] = s
    for s in ordered:  # patterns first, then the operator's own types
        for op in s.onnx_patterns:
            ONNX_OPS[op] = (*ONNX_OPS.get(op, ()), s)
    for s in ordered:
        for op in s.onnx_ops:
            if s not in ONNX_OPS.get(op, ()):
                ONNX_OPS[op] = (*ONNX_OPS.get(op, ()), s)


@dataclass
class Layer:
    """One layer of a network, as the estimator sees it (after fusion)."""

    name: str
    type: str
    params: dict[str, Any]
    counts: LayerCounts
    op_type: str = ""  # main ONNX op (for type 'other', the unknown op)
    nodes: list[str] = field(default_factory=list)  # ONNX node names folded into this layer
    input_shapes: list[tuple[int, ...]] = field(default_factory=list)
    output_shapes: list[tuple[int, ...]] = field(default_factory=list)
    activation: str | None = None  # fused activation kind
    flags: list[str] = field(default_factory=list)

    @property
    def features(self) -> dict[str, float]:
        return self.counts.features

    @property
    def macs(self) -> int:
        return self.counts.macs

    @property
    def n_params(self) -> int:
        return self.counts.params

    @property
    def ops(self) -> float:
        return self.counts.ops

    @property
    def bytes(self) -> int:
        return self.counts.bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "op_type": self.op_type,
            "params": dict(self.params),
            "features": dict(self.features),
            "macs": self.macs,
            "n_params": self.n_params,
            "ops": self.ops,
            "bytes": self.bytes,
            "input_shapes": [list(s) for s in self.input_shapes],
            "output_shapes": [list(s) for s in self.output_shapes],
            "activation": self.activation,
            "nodes": list(self.nodes),
            "flags": list(self.flags),
        }


def spec_for(layer_type: str) -> LayerTypeSpec:
    """The registered type, or a :class:`LayerSpecError` naming the known ones."""
    try:
        return SPECS[layer_type]
    except KeyError:
        raise LayerSpecError(f"unknown layer type {layer_type!r}; known: {', '.join(SPECS)}") from None


__all__ += ["spec_for", "discover"]
