"""Channel pruning as a user meets it (:mod:`estimator.pruning`, ``estimator lut``,
``examples/prune_resnet18.py``), on zoo networks exported here (nothing downloaded) and the
shipped profiles.

The channel groups are checked against Torch-Pruning's own dependency graph: the same
producers and the same consumers per group, and after a global magnitude pruning the latency
model's estimate of the kept widths is the estimate of the pruned module exported afresh.
"""
from __future__ import annotations

import csv
import functools
import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import pytest
import torch

from estimator import zoo
from estimator.cli import main as estimator_main
from estimator.errors import UserError
from estimator.layers import SPECS
from estimator.predict import Estimator
from service.client import strip_initializers
from estimator.pruning import (TABLE_COLUMNS, LatencyModel, LatencyTable, estimate_module, kept_counts,
                               latency_table, module_name)

ROOT = Path(__file__).resolve().parents[1]
RES = 64
SHAPE = (1, 3, RES, RES)
#: the stem and the producers of ResNet-18's residual stages (torch module names)
RESNET18_STAGES = [
    {"conv1", "layer1.0.conv2", "layer1.1.conv2"},
    {"layer2.0.downsample.0", "layer2.0.conv2", "layer2.1.conv2"},
    {"layer3.0.downsample.0", "layer3.0.conv2", "layer3.1.conv2"},
    {"layer4.0.downsample.0", "layer4.0.conv2", "layer4.1.conv2"},
]


class _Profiles(dict):
    """Shipped profiles by name, each loaded on first use (models cached under CL_CACHE_DIR)."""

    def __missing__(self, name: str) -> Estimator:
        self[name] = Estimator.from_profile(name)
        return self[name]


@pytest.fixture(scope="module")
def estimators() -> dict[str, Estimator]:
    return _Profiles()


@pytest.fixture(scope="module")
def est(estimators) -> Estimator:
    return estimators["host-cpu"]


@pytest.fixture(scope="module")
def r18_onnx() -> bytes:
    return zoo.export_onnx(zoo.build("resnet18", RES), input_shape=SHAPE)


@pytest.fixture(scope="module")
def r18(est, r18_onnx) -> LatencyModel:
    return LatencyModel(est, r18_onnx, name="resnet18")


@pytest.fixture(scope="module")
def r18_table(est, r18_onnx) -> LatencyTable:
    return latency_table(r18_onnx, est, step=8)


@pytest.fixture(scope="module")
def tp():
    return pytest.importorskip("torch_pruning", reason="needs the prune extra (torch-pruning)")


def _modules(lm: LatencyModel, layer_indices) -> set[str]:
    return {module_name(lm.layers[i].name) for i in layer_indices}


def _ports(lm: LatencyModel, group, port: str, layer_type: str | None = None) -> set[str]:
    return _modules(lm, [p.layer for p in group.ports
                         if p.port == port and (layer_type is None or lm.layers[p.layer].type == layer_type)])


def _rel(a: float, b: float) -> float:
    return abs(a / b - 1) if b else abs(a)


# ------------------------------------------------- channel groups against Torch-Pruning

TP_NETWORKS = [
    pytest.param("resnet18", {}, id="resnet18"),
    pytest.param("mobilenet_v2", {}, id="mobilenet_v2"),
    pytest.param("googlenet", {}, id="googlenet-concat"),
    pytest.param("densenet121", {"block_config": (2, 2, 2, 2)}, id="densenet-concat"),
]


@pytest.mark.parametrize("name, kwargs", TP_NETWORKS)
def test_groups_and_pruned_estimate_match_torch_pruning(tp, est, name, kwargs):
    torch.manual_seed(0)
    model = zoo.build(name, RES, **kwargs).eval()
    example = torch.zeros(SHAPE)
    lm = LatencyModel(est, zoo.export_onnx(model, input_shape=SHAPE), name=name)
    prunable = [g for g in lm.groups if g.prunable]
    assert prunable
    names = {m: n for n, m in model.named_modules()}

    # 1. each prunable group is Torch-Pruning's group of its first producer: the same dense
    #    producers (output channels), consumers (input channels) and depthwise convs
    dg = tp.DependencyGraph().build_dependency(model, example_inputs=example)
    for g in prunable:
        root = model.get_submodule(module_name(lm.layers[g.producers[0]].name))
        how = tp.prune_conv_out_channels if isinstance(root, torch.nn.Conv2d) else tp.prune_linear_out_channels
        producers, consumers, depthwise = set(), set(), set()
        for dep, _ in dg.get_pruning_group(root, how, idxs=[0]):
            m = dep.target.module
            if not isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
                continue
            if isinstance(m, torch.nn.Conv2d) and m.groups > 1:
                depthwise.add(names[m])
            elif dep.handler.__name__ == "prune_out_channels":
                producers.add(names[m])
            elif dep.handler.__name__ == "prune_in_channels":
                consumers.add(names[m])
        assert _ports(lm, g, "out") == producers, g.name
        assert _ports(lm, g, "in") == consumers, g.name
        assert _ports(lm, g, "through", "dwconv2d") == depthwise, g.name

    # 2. a global magnitude pruning by Torch-Pruning (uneven widths), the classifier kept
    classifier = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
    pruner = tp.pruner.MagnitudePruner(model, example, importance=tp.importance.MagnitudeImportance(p=1),
                                       pruning_ratio=0.5, global_pruning=True, ignored_layers=[classifier])
    pruner.step()
    kept: dict[int, int] = {}
    for g in prunable:
        widths = {model.get_submodule(module_name(lm.layers[i].name)).out_channels for i in g.producers}
        assert len(widths) == 1, (g.name, widths)  # a group's producers lose the same channels
        kept[g.index] = widths.pop()
    ratios = {round(kept[g.index] / g.channels, 2) for g in prunable}
    assert sum(kept[g.index] < g.channels for g in prunable) >= len(prunable) // 2
    assert len(ratios) >= 3, ratios  # uneven: a group-level mistake cannot hide behind one ratio

    # 3. the same layers: the model's pruned layers are the pruned module's, type by type
    pruned_onnx = zoo.export_onnx(model, input_shape=SHAPE)
    mine = lm.pruned_layers(kept)
    theirs = est.load_network(pruned_onnx).layers
    assert [(l.name, l.type) for l in mine] == [(l.name, l.type) for l in theirs]
    for a, b in zip(mine, theirs):
        assert a.features == b.features, (a.name, a.features, b.features)
        assert a.ops == b.ops, a.name

    # 4. the same numbers: the model's estimate is the exported pruned module's (0.5 %)
    e_model = lm.estimate(kept)
    e_module = estimate_module(model, SHAPE, est)
    assert _rel(e_model.total_ms, e_module.total_ms) < 0.005
    for metric in ("CM_LV", "CM_O"):
        for end in (0, 1):
            assert _rel(e_model.intervals[metric][0.9][end], e_module.intervals[metric][0.9][end]) < 0.005
    assert _rel(e_model.total_ms, est.estimate_network(pruned_onnx).total_ms) < 0.005


# ------------------------------------------------------------------- groups


def test_resnet18_groups(r18):
    lm = r18
    prunable = [g for g in lm.groups if g.prunable]
    assert len(prunable) == 12
    by_producers = [_ports(lm, g, "out") for g in prunable]
    for stage in RESNET18_STAGES:  # a residual stage is one group: the adds join its producers
        assert stage in by_producers
    block_convs = {f"layer{s}.{b}.conv1" for s in range(1, 5) for b in range(2)}
    assert sorted(map(sorted, by_producers)) == sorted(map(sorted, [*RESNET18_STAGES, *({c} for c in block_convs)]))

    stem = lm.group("conv1")
    assert stem.channels == 64 and stem.name == "conv1"
    assert lm.group("layer1.1.conv2") is stem  # any producer finds its group
    assert _ports(lm, stem, "in") == {"layer1.0.conv1", "layer1.1.conv1", "layer2.0.conv1", "layer2.0.downsample.0"}
    assert {lm.layers[p.layer].type for p in stem.ports if p.port == "through"} == {"maxpool", "add"}
    assert [lm.group(next(iter(s))).channels for s in RESNET18_STAGES] == [64, 128, 256, 512]
    last = lm.group("layer4.0.downsample.0")  # read by the classifier through pool and flatten
    assert "fc" in _ports(lm, last, "in")

    fc = lm.group("fc")
    assert not fc.prunable and fc.channels == 1000
    assert fc.blocked == ["its channels are the network's output"]
    inputs = [g for g in lm.groups if not g.producers]
    assert len(inputs) == 1 and not inputs[0].prunable and inputs[0].channels == 3
    assert inputs[0].blocked == ["the network's input"]
    for g in (fc, inputs[0]):
        with pytest.raises(UserError, match="cannot be pruned"):
            lm.estimate({g.index: 1})
    d = stem.to_dict(lm.layers)
    assert d["prunable"] and d["modules"] == ["conv1", "layer1.0.conv2", "layer1.1.conv2"]


def test_group_lookup_and_kept_checks(r18):
    lm = r18
    stem = lm.group("conv1")
    assert lm.group(stem.index) is stem and lm.group("/layer1/layer1.0/conv2/Conv") is stem
    with pytest.raises(UserError):
        lm.group("no.such.module")
    for bad in (0, stem.channels + 1):
        with pytest.raises(UserError, match="keeps 1..64 channels"):
            lm.estimate({stem.index: bad})
    # one group under its index and its name counts once
    assert lm.estimate({stem.index: 32, "conv1": 32}).total_ms == lm.estimate({stem.index: 32}).total_ms
    with pytest.raises(UserError, match="given twice"):
        lm.estimate({stem.index: 32, "conv1": 48})
    assert lm.estimate({}).total_ms == lm.estimate().total_ms == lm.base.total_ms


@pytest.mark.parametrize("name", ["deit_tiny", "mobilevit_xs"])
def test_attention_networks(est, name):
    """Every group of a transformer is prunable (its widths, MLP hidden widths and heads) but
    the network's input and the classifier's outputs, kept whole with a reason; every group
    estimates at any width with consistent layers."""
    data = zoo.export_onnx(name, RES)
    lm = LatencyModel(est, data, name=name)
    blocked = [g for g in lm.groups if not g.prunable]
    assert sorted(w for g in blocked for w in g.blocked) == ["its channels are the network's output",
                                                             "the network's input"]
    assert lm.estimate().total_ms == pytest.approx(est.estimate_network(data).total_ms, rel=1e-9)
    for g in lm.groups:
        if not g.prunable:
            continue
        for k in (1, max(1, g.channels // 2)):
            layers = lm.pruned_layers({g.index: k})
            for p in g.ports:
                if p.port in ("out", "through"):  # the group's channels are where its layers keep them
                    assert SPECS[layers[p.layer].type].channels_at(layers[p.layer].params, p.port) == k * p.mult
            assert lm.estimate({g.index: k}).total_ms > 0
    table = latency_table(data, est, step=max(g.channels for g in lm.groups))
    assert table.total_ms == pytest.approx(lm.base.total_ms, rel=1e-6)


def test_deit_mlp_hidden_group_is_not_pruned_as_tokens(est):
    """DeiT's MLP activation works on a [tokens, features] tensor whose ``c`` parameter counts
    tokens: its group cannot be pruned by changing ``c``."""
    lm = LatencyModel(est, zoo.export_onnx("deit_tiny", RES))
    hidden = [g for g in lm.groups if g.channels == 768 and g.producers]
    assert hidden
    for g in hidden:
        through = [lm.layers[p.layer] for p in g.ports if p.port == "through"]
        assert g.prunable is False or all(SPECS[l.type].channels_at(l.params, "through") == 768 for l in through)


def test_deit_groups_are_the_same_with_and_without_weights(est):
    """The service's client strips weights; a token linear is then one fc reading
    ``[1, tokens, features]``, as with its weights (the importer keeps MatMul + Add): the MLP's
    hidden groups are found in both, on the features axis."""
    data = zoo.export_onnx("deit_tiny", RES)
    full, stripped = LatencyModel(est, data), LatencyModel(est, strip_initializers(data))

    def groups(lm: LatencyModel) -> list[tuple]:
        return [(g.channels, g.prunable, [(p.layer, p.port, p.mult) for p in g.ports]) for g in lm.groups]

    assert groups(full) == groups(stripped)
    hidden = [g for g in stripped.groups if g.prunable and g.channels == 768]
    assert len(hidden) == 12  # one per block
    for g in hidden:
        assert [stripped.layers[p.layer].type for p in g.ports] == ["fc", "activation", "fc"]


#: MobileViT-XS's blocks with a transformer
MOBILEVIT_BLOCKS = ("layer3.1", "layer4.1", "layer5.1")


def _narrow_deit(model: torch.nn.Module, k: int) -> torch.nn.Module:
    """DeiT with its embedding width cut to ``k``: the patch embedding, class and position
    tokens, every layer norm, each block's qkv input, projection output and MLP ends, and the
    head's input (the attention's own width and the MLP's hidden width stay)."""
    nn = torch.nn
    model.patch_embed = nn.Conv2d(3, k, 16, 16)
    model.cls_token = nn.Parameter(torch.randn(1, 1, k))
    model.pos_embed = nn.Parameter(torch.randn(1, model.pos_embed.shape[1], k))
    for b in model.blocks:
        b.norm1, b.norm2 = nn.LayerNorm(k, eps=1e-6), nn.LayerNorm(k, eps=1e-6)
        b.attn.qkv = nn.Linear(k, b.attn.qkv.out_features)
        b.attn.proj = nn.Linear(b.attn.proj.in_features, k)
        b.mlp[0] = nn.Linear(k, b.mlp[0].out_features)
        b.mlp[2] = nn.Linear(b.mlp[2].in_features, k)
    model.norm = nn.LayerNorm(k, eps=1e-6)
    model.head = nn.Linear(k, model.head.out_features)
    return model.eval()


def _narrow_efficientformer(model: torch.nn.Module, k: int) -> torch.nn.Module:
    """EfficientFormer with its last stage cut to ``k`` channels, from the embedding conv through
    the Meta4D blocks, the flattening to tokens and the Meta3D block to both heads."""
    nn = torch.nn

    def scale(*shape: int) -> nn.Parameter:
        return nn.Parameter(torch.rand(*shape) + 0.5)

    stages = [i for i, m in enumerate(model.network) if isinstance(m, nn.Sequential)]
    emb = model.network[stages[-1]]
    emb[0], emb[1] = nn.Conv2d(emb[0].in_channels, k, 3, 2, 1), nn.BatchNorm2d(k)
    for blk in list(model.network)[stages[-1] + 1:]:
        if type(blk).__name__ == "_Meta4D":
            blk.mlp[0] = nn.Conv2d(k, blk.mlp[0].out_channels, 1)
            blk.mlp[3], blk.mlp[4] = nn.Conv2d(blk.mlp[3].in_channels, k, 1), nn.BatchNorm2d(k)
            blk.layer_scale_1, blk.layer_scale_2 = scale(k, 1, 1), scale(k, 1, 1)
        elif type(blk).__name__ == "_Meta3D":
            blk.norm1, blk.norm2 = nn.LayerNorm(k), nn.LayerNorm(k)
            t = blk.token_mixer
            t.qkv, t.proj = nn.Linear(k, t.qkv.out_features), nn.Linear(t.proj.in_features, k)
            blk.mlp[0], blk.mlp[2] = nn.Linear(k, blk.mlp[0].out_features), nn.Linear(blk.mlp[2].in_features, k)
            blk.layer_scale_1, blk.layer_scale_2 = scale(k), scale(k)
    model.norm = nn.LayerNorm(k)
    model.head, model.dist_head = nn.Linear(k, 1000), nn.Linear(k, 1000)
    return model.eval()


def _narrow_mobilevit(model: torch.nn.Module, k: int, blocks: Sequence[str] = MOBILEVIT_BLOCKS) -> torch.nn.Module:
    """MobileViT with the transformer width of ``blocks`` cut to ``k``: the 1x1 conv into it, its
    unfolding into patches and folding back, every layer norm and token linear's input or output,
    and the 1x1 conv out of it (the attention's and the MLP's own widths stay)."""
    nn = torch.nn
    for name in blocks:
        blk = model.get_submodule(name)
        blk.local[1] = nn.Conv2d(blk.local[1].in_channels, k, 1, bias=False)
        for b in blk.transformer:
            b.norm1, b.norm2 = nn.LayerNorm(k), nn.LayerNorm(k)
            b.attn.qkv = nn.Linear(k, b.attn.qkv.out_features)
            b.attn.proj = nn.Linear(b.attn.proj.in_features, k)
            b.mlp[0], b.mlp[2] = nn.Linear(k, b.mlp[0].out_features), nn.Linear(b.mlp[2].in_features, k)
        blk.norm = nn.LayerNorm(k)
        blk.proj[0] = nn.Conv2d(k, blk.proj[0].out_channels, 1, bias=blk.proj[0].bias is not None)
    return model.eval()


def _assert_cut_is_module(est: Estimator, lm: LatencyModel, kept: dict[int, int], data: bytes) -> None:
    """The latency model's layers and estimate with ``kept`` are those of the module built so
    (``data``: its ONNX export)."""
    mine, theirs = lm.pruned_layers(kept), est.load_network(data).layers
    assert [(l.name, l.type) for l in mine] == [(l.name, l.type) for l in theirs]
    for a, b in zip(mine, theirs):
        assert (a.features, a.ops) == (b.features, b.ops), a.name
    assert lm.estimate(kept).total_ms == pytest.approx(est.estimate_network(data).total_ms, rel=1e-9)


@pytest.mark.parametrize("name, group, narrow, widths", [
    ("deit_tiny", "patch_embed", _narrow_deit, (96, 37)),
    ("efficientformer_l1", "network.13.0", _narrow_efficientformer, (200, 64)),
    ("mobilevit_xs", "layer4.1.local.1", functools.partial(_narrow_mobilevit, blocks=("layer4.1",)), (72, 13)),
])
def test_a_transformer_width_is_one_prunable_group(est, name, group, narrow, widths):
    """A transformer's width runs from the convolution before it (a patch embedding, the last
    conv stage, MobileViT's 1x1 into the block) through the layouts to tokens (a flattening and
    transposition, MobileViT's unfolding into 2x2 patches), the token concat and gather, every
    layer norm, residual add and token linear, back to a feature map or to the heads: one
    group. Cut to a width, its layers and estimate are those of the module built at that width."""
    torch.manual_seed(0)
    model = zoo.build(name, RES).eval()
    lm = LatencyModel(est, zoo.export_onnx(model, input_shape=SHAPE), name=name)
    g = lm.group(group)
    assert g.prunable and g.producers[0] == lm.index(group), g.blocked
    ports = {(lm.layers[p.layer].type, p.port) for p in g.ports}
    assert {("layernorm", "c"), ("transpose", "h"), ("reshape", "c"), ("fc", "in"), ("fc", "out")} <= ports
    transpose = next(p.layer for p in g.ports if lm.layers[p.layer].type == "transpose" and p.mult == 1)
    for k in widths:
        assert lm.layer(transpose, c_in=k).c_in == k
        _assert_cut_is_module(est, lm, {g.index: k},
                              zoo.export_onnx(narrow(zoo.build(name, RES), k), input_shape=SHAPE))


def _narrow_heads(model: torch.nn.Module, path: str, heads: int) -> torch.nn.Module:
    """The attention at ``path`` with ``heads`` heads of the same size: its qkv projection's
    output, its output projection's input and (EfficientFormer) its bias table per head."""
    nn = torch.nn
    attn = model.get_submodule(path)
    per = attn.qkv.out_features // attn.heads  # q, k and v entries of one head
    attn.heads = heads
    attn.qkv = nn.Linear(attn.qkv.in_features, heads * per)
    value = getattr(attn, "d", None) or attn.head_dim  # v entries of one head
    attn.proj = nn.Linear(heads * value, attn.proj.out_features)
    if hasattr(attn, "attention_biases"):
        attn.attention_biases = nn.Parameter(attn.attention_biases[:heads].detach().clone())
    return model.eval()


@pytest.mark.parametrize("name, path, heads, kept", [
    ("deit_tiny", "blocks.0.attn", 3, (2, 1)),
    ("efficientformer_l1", "network.18.token_mixer", 8, (5, 1)),
    ("mobilevit_xs", "layer4.1.transformer.2.attn", 4, (3, 2)),
])
def test_attention_heads_are_one_prunable_group(est, name, path, heads, kept):
    """An attention's heads run from its q/k/v projection, split into heads by a reshape,
    through the q, k, v gather or split, both products (a batch per head), the scale, the bias
    and the softmax, back through the merging reshape to the output projection's input: one
    group of ``heads`` channels, each the head's q, k and v entries. Cut to fewer heads, its
    layers and estimate are those of the module built with that many."""
    torch.manual_seed(0)
    lm = LatencyModel(est, zoo.export_onnx(zoo.build(name, RES).eval(), input_shape=SHAPE), name=name)
    g = lm.group(f"{path}.qkv")
    assert g.prunable and g.channels == heads, g.blocked
    ports = {(lm.layers[p.layer].type, p.port) for p in g.ports}
    assert {("fc", "out"), ("reshape", "w"), ("matmul", "b"), ("softmax", "c"), ("fc", "in")} <= ports
    assert module_name(lm.layers[max(g.layers)].name) == f"{path}.proj"
    assert g.unit == lm.layers[g.producers[0]].params["c_out"] // heads
    # the table's default step (8 projection outputs) goes head by head
    assert sorted({k for gi, k in lm.table().entries if gi == g.index}) == list(range(1, heads + 1))
    for k in kept:
        _assert_cut_is_module(est, lm, {g.index: k},
                              zoo.export_onnx(_narrow_heads(zoo.build(name, RES), path, k), input_shape=SHAPE))


class _UnbindAttention(torch.nn.Module):
    """Attention as timm writes it: ``qkv.unbind(0)`` (a Split and Squeezes in ONNX), by hand or
    by ``scaled_dot_product_attention``."""

    def __init__(self, heads: int, sdpa: bool, dim: int = 64, head_dim: int = 16) -> None:
        super().__init__()
        self.heads, self.head_dim, self.sdpa = heads, head_dim, sdpa
        self.pre, self.qkv = torch.nn.Linear(32, dim), torch.nn.Linear(dim, 3 * heads * head_dim)
        self.proj, self.post = torch.nn.Linear(heads * head_dim, dim), torch.nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre(x)
        b, n, _ = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        if self.sdpa:
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        else:
            o = torch.softmax(q @ k.transpose(-2, -1) * self.head_dim ** -0.5, dim=-1) @ v
        return self.post(self.proj(o.transpose(1, 2).reshape(b, n, self.heads * self.head_dim)))


@pytest.mark.parametrize("sdpa", [False, True])
def test_heads_of_attention_written_with_unbind(est, sdpa):
    """The heads group through timm's form of attention (q, k, v out of a split and squeezes;
    by hand or by PyTorch's fused attention, exported as its parts): exact at every count."""
    def onnx(heads: int) -> bytes:
        torch.manual_seed(0)
        buf = io.BytesIO()
        with torch.no_grad():
            torch.onnx.export(_UnbindAttention(heads, sdpa).eval(), (torch.zeros(1, 50, 32),), buf, dynamo=False,
                              opset_version=17)
        return buf.getvalue()

    lm = LatencyModel(est, onnx(4))
    pre = lm.group("pre")  # the network's input is tokens: the first linear reads their last axis
    assert pre.prunable and {(lm.layers[p.layer].name, p.port) for p in pre.ports} == {("/pre/MatMul", "out"),
                                                                                      ("/qkv/MatMul", "in")}
    g = lm.group("qkv")
    assert g.prunable and (g.channels, g.unit) == (4, 48)
    for k in (3, 1):
        _assert_cut_is_module(est, lm, {g.index: k}, onnx(k))


def test_a_grouped_conv1d_keeps_its_channels_on_axis_1(est):
    """A grouped 1-D conv (kept whole) writes ``[batch, channels, length]``, not tokens: the
    dense conv after it still reads those channels, and its own output group stays prunable."""
    net = torch.nn.Sequential(torch.nn.Conv1d(8, 32, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 3, padding=1, groups=4), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 48, 1), torch.nn.ReLU(), torch.nn.Conv1d(48, 16, 1)).eval()
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(net, (torch.zeros(1, 8, 50),), buf, dynamo=False, opset_version=17)
    groups = LatencyModel(est, buf.getvalue()).groups
    assert [(g.channels, g.prunable) for g in groups if g.producers] == [(32, False), (48, True), (16, False)]


# -------------------------------------------------------------------- kept counts


@pytest.mark.parametrize("channels, kw, expected", [
    (64, {"step": 8}, [64, 56, 48, 40, 32, 24, 16, 8]),
    (20, {"step": 8}, [20, 12, 4]),
    (5, {"step": 8}, [5]),
    (4, {"step": 1}, [4, 3, 2, 1]),
    (64, {"ratios": [0.5, 0.25]}, [64, 48, 32]),
    (64, {"ratios": [0.3]}, [64, 45]),  # 64 - floor(19.2)
    (10, {"ratios": [0.95]}, [10, 1]),
    (1, {"ratios": [0.5, 0.99]}, [1]),  # at least one channel kept
    (7, {"ratios": [0.5, 0.5, 0.0]}, [7, 4]),
    (64, {"ratios": []}, [64]),
])
def test_kept_counts(channels, kw, expected):
    assert kept_counts(channels, **kw) == expected


@pytest.mark.parametrize("kw, message", [
    ({"step": 0}, "step must be >= 1"),
    ({"step": -8}, "step must be >= 1"),
    ({"ratios": [1.0]}, r"in \[0, 1\)"),
    ({"ratios": [0.5, -0.1]}, r"in \[0, 1\)"),
    ({"ratios": [math.nan]}, r"in \[0, 1\)"),
    ({"step": 8, "ratios": [0.5]}, "not both"),
    ({}, "step or pruning ratios"),
])
def test_kept_counts_refuses(kw, message):
    with pytest.raises(UserError, match=message):
        kept_counts(64, **kw)


# ------------------------------------------------------------------------ tables


@pytest.mark.parametrize("device", ["host-cpu", "imx93"])
def test_table_full_width_rows_sum_to_the_estimate(estimators, r18_onnx, device):
    est = estimators[device]
    table = latency_table(r18_onnx, est, step=8)
    lm = table.model
    predict = est.estimate_network(r18_onnx).total_ms
    assert table.total_ms == pytest.approx(sum(r.ms for r in table.base.values()))
    assert _rel(table.total_ms, predict) < 0.01
    assert set(table.base) == {i for i, c in enumerate(lm.context) if c is not None}
    for g in lm.groups:
        ks = sorted({k for gi, k in table.entries if gi == g.index}, reverse=True)
        if not g.prunable:
            assert ks == []
            continue
        assert ks == kept_counts(g.channels, step=8)
        touched = [i for i in g.layers if lm.context[i] is not None]
        base = sum(table.base[i].ms for i in touched)
        assert table.saved_ms(g.index, g.channels) == 0
        assert table.group_ms(g.index, g.channels) == pytest.approx(base, rel=1e-9)
        assert lm.group_ms(g.index, g.channels) == pytest.approx(base, rel=1e-9)
        for k in ks:
            rows = table.entries[(g.index, k)]
            assert [i for i, _ in rows] == touched
            at = dict(rows)
            for p in g.ports:  # each row's channels are the cut's
                if p.layer not in at:
                    continue
                full = SPECS[lm.layers[p.layer].type].channels_at(lm.layers[p.layer].params, p.port)
                if p.port == "out":
                    assert at[p.layer].c_out == k
                elif p.port == "in":
                    assert at[p.layer].c_in == full - (g.channels - k) * p.mult
                elif p.port == "through":
                    assert at[p.layer].c_in == at[p.layer].c_out == k * p.mult


def test_layer_lookup_and_cache(r18):
    lm = r18
    i = lm.index("layer1.0.conv1")
    assert lm.layers[i].name == "/layer1/layer1.0/conv1/Conv"
    assert lm.index("/layer1/layer1.0/conv1/Conv") == i
    by_index = lm.layer(i, c_in=32, c_out=48)
    assert lm.layer("/layer1/layer1.0/conv1/Conv", c_in=32, c_out=48) is by_index
    assert lm.layer("layer1.0.conv1", c_in=32, c_out=48) is by_index
    assert lm(i, c_in=32, c_out=48) is by_index
    assert (by_index.c_in, by_index.c_out) == (32, 48)
    assert lm.layer(i) is lm.layer(i)
    assert (lm.layer(i).c_in, lm.layer(i).c_out) == (64, 64)
    assert set(by_index.intervals) >= {"CM_LV", "CM_O"}
    for metric, (lo, hi) in by_index.intervals.items():
        assert 0 < lo <= hi, metric

    pool = lm.index("maxpool")  # a layer that keeps its channels takes either count
    assert lm.layer(pool, c_in=32) is lm.layer(pool, c_out=32) is lm.layer(pool, c_in=32, c_out=32)
    assert lm.layer(pool, c_in=32).c_in == 32
    with pytest.raises(UserError, match="keeps its channels"):
        lm.layer(pool, c_in=32, c_out=48)

    for kw in ({"c_out": 0}, {"c_in": 0}, {"c_in": -3, "c_out": 8}):
        with pytest.raises(UserError, match="channels"):
            lm.layer(i, **kw)
    with pytest.raises(UserError, match="channels"):
        lm.layer(pool, c_in=0)
    with pytest.raises(UserError, match="out of range"):
        lm.layer(len(lm.layers))
    with pytest.raises(UserError, match="no layer"):
        lm.layer("layer9.conv1")

    free = [k for k, c in enumerate(lm.context) if c is None]
    for k in free:  # a layer the device runs for free costs nothing at any width
        assert lm.layer(k).ms == 0 and "free_on_device" in lm.layer(k).flags


def test_layers_at_is_layer_in_one_batch(r18):
    lm = r18
    conv, pool = lm.index("layer2.0.conv1"), lm.index("maxpool")
    queries = [(conv, None, c) for c in (17, 33, 120)] + [(pool, 21, None), ("layer2.0.conv2", 99, None)]
    batch = lm.layers_at(queries)  # uncached: answered together
    assert [(r.c_in, r.c_out) for r in batch] == [(64, 17), (64, 33), (64, 120), (21, 21), (99, 128)]
    for (layer, c_in, c_out), r in zip(queries, batch):
        assert lm.layer(layer, c_in=c_in, c_out=c_out) is r
    with pytest.raises(UserError, match="channels"):
        lm.layers_at([(conv, None, 8), (conv, None, 0)])


def test_group_ms(r18):
    lm = r18
    halves = lm.table(ratios=[0.5])
    for g in lm.groups:
        if not g.prunable:
            continue
        touched = [i for i in g.layers if lm.context[i] is not None]
        assert lm.group_ms(g.index, g.channels) == pytest.approx(sum(lm.layer(i).ms for i in touched), rel=1e-9)
        assert lm.group_ms(g.index, g.channels // 2) == pytest.approx(halves.group_ms(g.index, g.channels // 2),
                                                                      rel=1e-9)
    # with the stem's group at 16, block layer1.0's first conv reads 16 channels, its second writes 16
    stem, inner = lm.group("conv1"), lm.group("layer1.0.conv1")
    conv1, conv2 = lm.index("layer1.0.conv1"), lm.index("layer1.0.conv2")
    assert sorted(inner.layers) == [conv1, conv2]
    expected = lm.layer(conv1, c_in=16, c_out=32).ms + lm.layer(conv2, c_in=32, c_out=16).ms
    assert lm.group_ms(inner.index, 32, {stem.index: 16}) == pytest.approx(expected, rel=1e-9)
    assert lm.group_ms(inner.index, 32, {"conv1": 16}) == pytest.approx(expected, rel=1e-9)
    assert lm.group_ms(inner.index, 32) == pytest.approx(lm.layer(conv1, c_out=32).ms + lm.layer(conv2, c_in=32).ms,
                                                         rel=1e-9)


def test_monotone_table(est, r18_onnx, r18_table):
    raw = r18_table
    mono = latency_table(r18_onnx, est, step=8, monotone=True)
    assert mono.monotone and not raw.monotone
    assert mono.base == raw.base and mono.entries.keys() == raw.entries.keys()
    rises = changed = 0
    for g in (g for g in mono.model.groups if g.prunable):
        ks = sorted({k for gi, k in mono.entries if gi == g.index}, reverse=True)
        for j, i in enumerate(i for i, _ in mono.entries[(g.index, ks[0])]):
            series = [mono.entries[(g.index, k)][j] for k in ks]
            before = [raw.entries[(g.index, k)][j] for k in ks]
            assert {s[0] for s in series} == {i}
            rises += sum(b[1].ms > a[1].ms for a, b in zip(before, before[1:]))
            assert series[0] == before[0]  # the full width is kept as it is
            for (_, a), (_, b) in zip(series, series[1:]):  # non-increasing as kept falls
                assert b.ms <= a.ms
                for m in a.intervals:
                    assert b.intervals[m][0] <= a.intervals[m][0] and b.intervals[m][1] <= a.intervals[m][1], m
            for (_, r), (_, r0) in zip(series, before):  # never raises a value
                assert r.ms <= r0.ms
                for m in r.intervals:
                    assert r.intervals[m][0] <= r0.intervals[m][0] and r.intervals[m][1] <= r0.intervals[m][1]
                    assert r.intervals[m][0] <= r.ms <= r.intervals[m][1]
                assert any(f == "monotone" or f.startswith("monotone_from:") for f in r.flags) == (r != r0)
                changed += r != r0
    assert rises and changed  # the raw table has inversions for the running minimum to remove


def test_csv(r18_table):
    buf = io.StringIO()
    r18_table.to_csv(buf)
    reader = csv.DictReader(io.StringIO(buf.getvalue()))
    rows = list(reader)
    assert tuple(reader.fieldnames) == TABLE_COLUMNS
    assert len(rows) == len(r18_table.base) + sum(len(v) for v in r18_table.entries.values())
    for r in rows:
        assert set(r) == set(TABLE_COLUMNS) and None not in r
        ms, lo, hi = (float(r[k]) for k in ("ms", "cm_lv_lo", "cm_lv_hi"))
        assert 0 < lo <= ms * (1 + 1e-5) and ms <= hi * (1 + 1e-5)
        assert 0 < float(r["cm_o_lo"]) <= float(r["cm_o_hi"])
        assert int(r["layer_index"]) in r18_table.base or r["group"] != ""
        assert r["out_of_design_space"] in ("0", "1")
    base = [r for r in rows if r["group"] == ""]
    assert len(base) == len(r18_table.base)
    assert sum(float(r["ms"]) for r in base) == pytest.approx(r18_table.total_ms, rel=1e-5)
    stem = r18_table.model.group("conv1")
    for k in kept_counts(stem.channels, step=8):
        mine = [r for r in rows if r["group"] == str(stem.index) and r["kept"] == str(k)]
        assert {r["group_name"] for r in mine} == {"conv1"} and {r["channels"] for r in mine} == {"64"}
        assert sum(float(r["ms"]) for r in mine) == pytest.approx(r18_table.group_ms(stem.index, k), rel=1e-5)
        out = [r for r in mine if r["port"] == "out"]
        assert {r["module"] for r in out} == RESNET18_STAGES[0] and {r["c_out"] for r in out} == {str(k)}


def test_json(r18_table):
    buf = io.StringIO()
    r18_table.to_json(buf)
    d = json.loads(buf.getvalue())
    lm = r18_table.model
    assert d["device"] == "host-cpu" and d["step"] == 8 and d["ratios"] is None and d["monotone"] is False
    assert d["total_ms"] == pytest.approx(sum(l["ms"] for l in d["layers"]), rel=1e-9)
    assert d["estimate"]["total_ms"] == pytest.approx(lm.base.total_ms)
    assert _rel(d["total_ms"], d["estimate"]["total_ms"]) < 0.01
    assert len(d["groups"]) == len(lm.groups)
    with_entries = [g for g in d["groups"] if "entries" in g]
    assert [g["index"] for g in with_entries] == [g.index for g in lm.groups if g.prunable]
    for g in d["groups"]:
        assert g["prunable"] == ("entries" in g) and (g["prunable"] or g["blocked"])
        for e in g.get("entries", []):
            assert e["ms"] == pytest.approx(sum(l["ms"] for l in e["layers"]), rel=1e-9)
            assert e["saved_ms"] == pytest.approx(r18_table.saved_ms(g["index"], e["kept"]), abs=1e-12)
            if e["kept"] == g["channels"]:
                assert e["saved_ms"] == 0
        if "entries" in g:
            assert [e["kept"] for e in g["entries"]] == kept_counts(g["channels"], step=8)


# --------------------------------------------------------------------------- CLI


def _cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    rc = estimator_main(["lut", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


class _FiveGroupedReaders(torch.nn.Module):
    """A convolution whose output five grouped convolutions read: five reasons to keep it whole."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.branches = torch.nn.ModuleList(torch.nn.Conv2d(16, 16, 3, padding=1, groups=2) for _ in range(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        return sum(b(x) for b in self.branches)


def test_cli_summary_cuts_a_long_list_of_reasons(capsys, tmp_path):
    """A group kept whole by five readers: the summary names three reasons and counts the
    rest, which the JSON table lists."""
    model, path = tmp_path / "five.onnx", tmp_path / "five.json"
    model.write_bytes(zoo.export_onnx(_FiveGroupedReaders().eval(), input_shape=(1, 3, 16, 16)))
    rc, out, err = _cli(capsys, [str(model), "--device", "host-cpu", "--step", "8", "--out", str(path),
                                 "--no-progress"])
    assert rc == 0, err
    long = [g for g in json.loads(path.read_text())["groups"] if len(g["blocked"]) > 3 and g["producers"]]
    assert [g["name"] for g in long] == ["stem"] and len(long[0]["blocked"]) == 5
    for g in long:
        line = next(l for l in out.splitlines() if l.startswith(f"kept whole: {g['name']} "))
        assert line.endswith(f"; and {len(g['blocked']) - 3} more (the JSON table lists all)")
        assert "; ".join(g["blocked"][:3]) in line and g["blocked"][3] not in line


def test_cli_csv_ratios_monotone(capsys, tmp_path):
    path = tmp_path / "r18.csv"
    rc, out, err = _cli(capsys, ["zoo:resnet18@64", "--device", "host-cpu", "--ratios", "0.3,0.5", "--monotone",
                                 "--out", str(path), "--no-progress"])
    assert rc == 0, err
    assert err == ""
    assert out.splitlines()[0].startswith("resnet18@64 on host-cpu: ") and "12 prunable channel groups" in out
    assert "monotone" in out.splitlines()[0]
    assert "kept whole: fc (1000 channels): its channels are the network's output" in out
    assert out.rstrip().endswith(f"wrote {path}")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert tuple(reader.fieldnames) == TABLE_COLUMNS
    stem = {int(r["kept"]) for r in rows if r["group_name"] == "conv1"}
    assert stem == {64, 45, 32}  # 64 - floor(64 r) for r = 0, 0.3, 0.5
    assert {int(r["kept"]) for r in rows if r["group_name"] == "layer4.0.downsample.0"} == {512, 359, 256}


def test_cli_json(capsys, tmp_path):
    path = tmp_path / "r18.json"
    rc, out, err = _cli(capsys, ["zoo:resnet18@64", "--device", "host-cpu", "--out", str(path), "--json",
                                 "--no-progress"])
    assert rc == 0, err
    printed = json.loads(out)
    assert printed == json.loads(path.read_text())
    assert printed["network"] == "resnet18@64" and printed["step"] == 8 and printed["ratios"] is None
    groups = {g["name"]: g for g in printed["groups"]}
    assert [e["kept"] for e in groups["conv1"]["entries"]] == [64, 56, 48, 40, 32, 24, 16, 8]
    assert not groups["fc"]["prunable"] and "entries" not in groups["fc"]


@pytest.mark.parametrize("argv, message", [
    (["--out", "x.txt"], "--out must end in .csv or .json, got 'x.txt'"),
    (["--ratios", "1.5"], "--ratios must be in [0, 1), got 1.5"),
    (["--ratios", "a"], "--ratios must be comma-separated numbers in [0, 1), got 'a'"),
    (["--ratios", "0.5,-0.1"], "--ratios must be in [0, 1)"),
    (["--step", "0"], "--step must be >= 1, got 0"),
    (["--step", "8", "--ratios", "0.5"], "argument --ratios: not allowed with argument --step"),
    (["--device", "no-such-device"], "unknown device 'no-such-device'"),
    (["--confidence", "1"], "--confidence must be in (0, 1)"),
])
def test_cli_errors(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    device = [] if "--device" in argv else ["--device", "host-cpu"]
    rc, out, err = _cli(capsys, ["zoo:resnet18@64", *device, *argv])
    lines = err.strip().splitlines()
    assert rc == 2 and out == ""
    assert len(lines) == 1 and lines[0].startswith("estimator: error: "), err
    assert message in lines[0], lines[0]
    assert list(tmp_path.iterdir()) == []


def test_cli_unknown_zoo_network(capsys):
    rc, out, err = _cli(capsys, ["zoo:no_such_net@64", "--device", "host-cpu"])
    lines = err.strip().splitlines()
    assert rc == 2 and out == "" and len(lines) == 1
    assert lines[0].startswith("estimator: error: unknown zoo network 'no_such_net'; known: resnet18, "), lines


# ------------------------------------------------------------------------ example


def test_example_prunes_resnet18_to_a_budget(tp, r18):
    lo, hi = r18.base.intervals["CM_LV"][0.9]
    budget = round(0.85 * hi, 3)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "prune_resnet18.py"), "--resolution", str(RES),
                        "--budget", str(budget)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout
    assert out.splitlines()[0].startswith(f"resnet18@{RES} on host-cpu: {r18.base.total_ms:.3f} ms, "
                                          f"CM_LV 0.9 [{lo:.3f}, {hi:.3f}] ms; budget {budget:g} ms")
    steps = re.search(r"^pruned in (\d+) steps", out, re.M)
    assert steps and int(steps.group(1)) >= 1, out
    pruned = re.search(r"^pruned estimate: ([\d.]+) ms, CM_LV 0\.9 \[([\d.]+), ([\d.]+)\] ms \(fits the ([\d.]+) ms "
                       r"budget\)$", out, re.M)
    assert pruned, out
    assert float(pruned.group(3)) <= budget and float(pruned.group(1)) < r18.base.total_ms
    agree = re.search(r"^the pruned module exported and estimated: ([\d.]+) ms \(([+-]\d+\.\d+) % from the latency "
                      r"model's\)$", out, re.M)
    assert agree, out
    assert abs(float(agree.group(2))) < 1
    assert float(agree.group(1)) == pytest.approx(float(pruned.group(1)), rel=0.01)
