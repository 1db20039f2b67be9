"""The transformer and MobileNetV4 members of the zoo: they build, run, match their papers'
parameter counts, export to ONNX and import with every node accounted for."""
from __future__ import annotations

import collections
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from estimator import zoo  # noqa: E402
from estimator.onnx_import import load_network  # noqa: E402

# name -> (default resolution, parameter count the paper reports)
MODERN: dict[str, tuple[int, float]] = {
    "deit_tiny": (224, 5.7e6),
    "mobilevit_xs": (256, 2.3e6),
    "efficientformer_l1": (224, 12.3e6),
    "mobilenet_v4_conv_small": (224, 3.8e6),
}


@pytest.mark.parametrize("name", list(MODERN))
def test_builds_runs_and_matches_the_paper(name):
    res, paper_params = MODERN[name]
    assert name in zoo.names()
    assert zoo.default_resolution(name) == res
    module = zoo.build(name)
    with torch.no_grad():
        out = module(torch.randn(1, 3, res, res))
    assert tuple(out.shape) == (1, 1000)
    assert torch.isfinite(out).all()
    n = zoo.param_count(module)
    assert abs(n / paper_params - 1) < 0.10, n


@pytest.mark.parametrize("name", list(MODERN))
def test_exports_and_imports_every_node(name):
    res = MODERN[name][0]
    t0 = time.perf_counter()
    data = zoo.export_onnx(name)
    t1 = time.perf_counter()
    net = load_network(data)
    t2 = time.perf_counter()
    assert net.inputs == {"input": (1, 3, res, res)}
    covered = net.covered_nodes()
    assert len(covered) == len(set(covered)), "a node is counted twice"
    assert sorted(covered) == sorted(n.name for n in net.model.graph.node)
    types = collections.Counter(la.type for la in net.layers)
    others = collections.Counter(la.op_type for la in net.other_layers)
    print(f"\n{name}@{res}: export {t1 - t0:.2f} s, import {t2 - t1:.2f} s, {len(net.layers)} layers, "
          f"{len(net.free_nodes)} free nodes\n  types {dict(sorted(types.items()))}\n  other {dict(others)}")


@pytest.mark.parametrize("name,res", [("deit_tiny", 160), ("mobilevit_xs", 224), ("efficientformer_l1", 160)])
def test_other_resolutions(name, res):
    with torch.no_grad():
        out = zoo.build(name, res)(torch.randn(1, 3, res, res))
    assert tuple(out.shape) == (1, 1000)


def test_deit_rejects_a_resolution_off_the_patch_grid():
    with pytest.raises(zoo.ZooError, match="divisible by the patch size"):
        zoo.build("deit_tiny", 100)
