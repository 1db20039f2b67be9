"""Independent MAC and parameter counts computed from torch modules with forward hooks.

These never look at ONNX. MACs: every ``nn.Conv2d`` call contributes
``output elements x (c_in / groups) x k_h x k_w``, every ``nn.Linear`` call
``output elements x in_features``. Parameters follow the deployed-kernel convention of
:mod:`estimator.onnx_import`: a BatchNorm2d whose input is exactly a conv's output is
folded into that conv (the conv gains a bias, the BN's scale and shift disappear); any
other BatchNorm2d keeps its scale and shift (2 x channels); PReLU keeps its slopes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class TorchCounts:
    macs: int
    params: int  # deployed: conv weights + bias (own or from a folded BN), fc, unfolded BN, PReLU
    torch_params: int  # torch's own count, sum(p.numel() for p in parameters())
    convs: int
    linears: int
    folded_bn: int
    standalone_bn: int
    folded_bn_channels: int


def count(module: nn.Module, input_shape: tuple[int, ...]) -> TorchCounts:
    conv_calls: list[dict] = []
    by_output: dict[int, dict] = {}
    keep: list[torch.Tensor] = []  # keep outputs alive so that id() stays unique
    totals = dict(macs=0, linear_params=0, bn_params=0, prelu_params=0, linears=0, standalone_bn=0)
    handles = []

    def conv_hook(m: nn.Conv2d, inp: tuple, out: torch.Tensor) -> None:
        k_h, k_w = m.kernel_size
        macs = out.numel() * (m.in_channels // m.groups) * k_h * k_w
        call = dict(macs=macs, weight=m.weight.numel(), c_out=m.out_channels, bias=m.bias is not None, bn=False)
        conv_calls.append(call)
        by_output[id(out)] = call
        keep.append(out)

    def linear_hook(m: nn.Linear, inp: tuple, out: torch.Tensor) -> None:
        totals["macs"] += out.numel() * m.in_features
        totals["linear_params"] += m.weight.numel() + (m.bias.numel() if m.bias is not None else 0)
        totals["linears"] += 1

    def bn_pre_hook(m: nn.BatchNorm2d, inp: tuple) -> None:
        call = by_output.get(id(inp[0]))
        if call is not None and not call["bn"]:
            call["bn"] = True
        else:
            totals["bn_params"] += 2 * m.num_features
            totals["standalone_bn"] += 1

    def prelu_hook(m: nn.PReLU, inp: tuple, out: torch.Tensor) -> None:
        totals["prelu_params"] += m.weight.numel()

    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            handles.append(m.register_forward_hook(conv_hook))
        elif isinstance(m, nn.Linear):
            handles.append(m.register_forward_hook(linear_hook))
        elif isinstance(m, nn.BatchNorm2d):
            handles.append(m.register_forward_pre_hook(bn_pre_hook))
        elif isinstance(m, nn.PReLU):
            handles.append(m.register_forward_hook(prelu_hook))
    try:
        with torch.no_grad():
            module.eval()(torch.zeros(input_shape))
    finally:
        for h in handles:
            h.remove()
    conv_params = sum(c["weight"] + (c["c_out"] if c["bias"] or c["bn"] else 0) for c in conv_calls)
    folded = [c for c in conv_calls if c["bn"]]
    return TorchCounts(
        macs=totals["macs"] + sum(c["macs"] for c in conv_calls),
        params=conv_params + totals["linear_params"] + totals["bn_params"] + totals["prelu_params"],
        torch_params=sum(p.numel() for p in module.parameters()),
        convs=len(conv_calls),
        linears=totals["linears"],
        folded_bn=len(folded),
        standalone_bn=totals["standalone_bn"],
        folded_bn_channels=sum(c["c_out"] for c in folded),
    )
