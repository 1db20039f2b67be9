"""The check every zoo network passes: its ONNX export imports with every node covered exactly
once, at the input shape it was built for."""
from __future__ import annotations

import collections
import time
from typing import Any, Callable


def import_every_node(name: str, res: int, export: Callable[[], bytes]) -> tuple[Any, collections.Counter,
                                                                                collections.Counter]:
    """``(network, layer types, op types left as other)``; prints the timings and the counts."""
    from estimator.onnx_import import load_network

    t0 = time.perf_counter()
    data = export()
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
    return net, types, others
