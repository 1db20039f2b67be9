"""GELU, in the forms torch exports (exact with Erf, tanh approximation), imports as one
activation of kind gelu; near-misses stay what their nodes are."""
import io

import pytest
import torch
from torch import nn

from estimator.onnx_import import load_network


def _export(module: nn.Module, shape=(1, 10, 16)) -> bytes:
    buf = io.BytesIO()
    torch.onnx.export(module.eval(), torch.randn(*shape), buf, opset_version=17, dynamo=False)
    return buf.getvalue()


class _Mlp(nn.Module):
    def __init__(self, act: nn.Module):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(16, 32), act, nn.Linear(32, 16)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


@pytest.mark.parametrize("approximate,nodes", [("none", 5), ("tanh", 9)])
@pytest.mark.parametrize("fast", [True, False])
def test_gelu_is_one_activation(approximate, nodes, fast):
    net = load_network(_export(_Mlp(nn.GELU(approximate=approximate))), fast=fast)
    gelu = [l for l in net.layers if l.type == "activation" or l.activation == "gelu"]
    assert len(gelu) == 1
    (g,) = gelu
    assert (g.params.get("kind") or g.activation) == "gelu"
    assert not [l for l in net.layers if l.type in ("other", "mul")]
    assert sum(len(l.nodes) for l in net.layers) + len(net.free_nodes) >= nodes


def test_gelu_after_a_convolution_whose_half_onnxsim_folds_away():
    m = nn.Sequential(nn.Conv2d(8, 16, 1), nn.GELU(), nn.Conv2d(16, 8, 1))
    net = load_network(_export(m, (1, 8, 14, 14)))
    assert not [l for l in net.layers if l.type == "other"], [(l.type, l.op_type) for l in net.layers]
    assert any(l.activation == "gelu" or l.params.get("kind") == "gelu" for l in net.layers)


def test_a_lone_erf_and_a_plain_division_stay_as_they_are():
    class NotGelu(nn.Module):
        def forward(self, x):
            return torch.erf(x / 1.4142135) + x / 3.0

    net = load_network(_export(NotGelu()))
    types = sorted((l.type, l.op_type) for l in net.layers)
    assert ("other", "Erf") in types and ("mul", "Div") in types
