"""What :mod:`estimator.onnx_shapes` (our shape propagation) gains over ONNX's shape inference
on the graphs the Python importer still sees (issue 19).

The native core (:mod:`estimator.native_import`) answers stripped MobileNet-class graphs
itself; every other graph goes to the Python importer: the zoo networks with weights (after
onnxsim) and the stripped ones the native core gives up on. For each such graph this
script captures the model at the importer's shape step (``load_network``'s call of
``propagate_shapes`` after onnxsim) and times, interleaved, per round:

* ``propagate_shapes`` as the importer calls it (dataless initializers, constant values);
* ``_infer_shapes``, the reference path: ``onnx.shape_inference.infer_shapes`` with
  constant folding where the graph was not simplified (on a copy of the model);

and checks that ``load_network`` gives the same layers, free nodes and warnings when the
shape step is ONNX's (``propagate_shapes`` answering None there). It prints the median of
the rounds per graph and the ratio ONNX / ours, and asserts nothing.

    python tests/perf/shape_paths.py [--rounds 7] [--names mobilenet_v2,squeezenet,...]
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import onnx  # noqa: E402

from estimator import onnx_import, zoo  # noqa: E402
from estimator.fusion import FusionRules  # noqa: E402
from estimator.onnx_strip import strip_initializers  # noqa: E402

#: the default set: the 14 CNNs the zoo held when docs/results.md quoted this script (19 graphs)
CLASSIC = ("resnet18", "resnet50", "mobilenet_v1", "mobilenet_v2", "mobilenet_v3", "efficientnet_b0", "shufflenet_v2",
           "squeezenet", "densenet121", "googlenet", "yolov5s", "mnasnet", "regnet_x_400mf", "vgg16")


def _signature(net) -> tuple:
    return ([(l.name, l.type, l.op_type, dict(l.params), dict(l.features), tuple(l.nodes), tuple(l.flags))
             for l in net.layers], dict(net.free_nodes), list(net.warnings))


def _capture(data: bytes) -> tuple[dict, object]:
    """The arguments of the importer's shape step for ``data``, and the imported network."""
    real = onnx_import.propagate_shapes
    seen: dict = {}

    def spy(model, nodes=None, **kw):
        if "const_values" in kw:  # the shape step (the other call is _already_simple's)
            seen.update(model=copy.deepcopy(model), nodes=nodes, kw={k: v for k, v in kw.items() if k != "const_values"})
        return real(model, nodes, **kw)

    onnx_import.propagate_shapes = spy
    try:
        net = onnx_import.load_network(data)
    finally:
        onnx_import.propagate_shapes = real
    return seen, net


def _import_with_onnx_shapes(data: bytes):
    real = onnx_import.propagate_shapes

    def none_at_shape_step(model, nodes=None, **kw):
        return None if "const_values" in kw else real(model, nodes, **kw)

    onnx_import.propagate_shapes = none_at_shape_step
    try:
        return onnx_import.load_network(data)
    finally:
        onnx_import.propagate_shapes = real


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--names", default=",".join(CLASSIC))
    a = ap.parse_args()
    rules = FusionRules.from_dict(None)
    rows = []
    for name in a.names.split(","):
        full = zoo.export_onnx(name)
        stripped = strip_initializers(full).SerializeToString()
        for variant, data in (("weights", full), ("stripped", stripped)):
            if variant == "stripped" and onnx_import._load_native(data, rules) is not None:
                print(f"{name:16s} {variant:8s} answered by the native core", flush=True)
                continue
            seen, net = _capture(data)
            if not seen:
                print(f"{name:16s} {variant:8s} no shape step (propagate_shapes not called)", flush=True)
                continue
            same = _signature(net) == _signature(_import_with_onnx_shapes(data))
            model, nodes, kw = seen["model"], seen["nodes"], seen["kw"]
            fold = kw.get("dataless") is not None
            ours_t, onnx_t = [], []
            ours_ok = True
            for _ in range(a.rounds):
                t0 = time.perf_counter()
                s = onnx_import.propagate_shapes(model, nodes, const_values={}, **kw)
                ours_t.append(time.perf_counter() - t0)
                ours_ok = ours_ok and s is not None
                m2 = onnx.ModelProto()
                m2.CopyFrom(model)
                t0 = time.perf_counter()
                onnx_import._infer_shapes(m2, [], fold=fold)
                onnx_t.append(time.perf_counter() - t0)
            o, r = statistics.median(ours_t), statistics.median(onnx_t)
            rows.append((name, variant, len(nodes), o, r))
            print(f"{name:16s} {variant:8s} nodes {len(nodes):4d}  onnx_shapes {1e3 * o:7.2f} ms  "
                  f"ONNX inference{' + folding' if fold else ''} {1e3 * r:7.2f} ms  ratio {r / o:5.2f}x  "
                  f"ours answered: {ours_ok}  same layers: {same}", flush=True)
    if rows:
        tot_o = sum(r[3] for r in rows)
        tot_r = sum(r[4] for r in rows)
        print(f"total over {len(rows)} graphs: onnx_shapes {1e3 * tot_o:.1f} ms, ONNX {1e3 * tot_r:.1f} ms "
              f"({tot_r / tot_o:.2f}x); median ratio {statistics.median(r[4] / r[3] for r in rows):.2f}x")


if __name__ == "__main__":
    main()
