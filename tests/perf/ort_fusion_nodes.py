"""What ONNX Runtime fuses: the optimised graph's nodes and their per-node kernel times for
the transformer patterns and the producer + activation pairs (a script, not a test: prints
what it sees).

Each pattern is a small ONNX graph (opset 17, static shapes, the node forms torch's exporter
writes and ``bench.modelgen`` renders). It is loaded by the ``onnxruntime`` runner's session
settings (graph optimisation as given, default 'all'; 1 thread), the optimised graph is
saved (``SessionOptions.optimized_model_filepath``) and listed node by node as
``op_type[domain]``, and the runner's per-node profile (:meth:`Runner.per_layer`, median
kernel time) gives each kernel's time. ``docs/layer-types.md`` ("Fusion on ONNX Runtime")
keeps what it printed.

    taskset -c 0 python tests/perf/ort_fusion_nodes.py [--only gelu] [--acts]
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.runners.base import get_runner  # noqa: E402

T, C, H, D = 197, 192, 3, 64  # ViT-Tiny: tokens, width, heads, head dim


class G:
    """A tiny graph builder (float32 tensors, opset 17)."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.inputs: list[Any] = []
        self.n = 0
        self.rng = np.random.default_rng(0)

    def inp(self, name: str, shape: tuple[int, ...]) -> str:
        from onnx import TensorProto, helper

        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def const(self, v: Any, dtype: Any = np.float32) -> str:
        from onnx import numpy_helper

        self.n += 1
        name = f"c{self.n}"
        self.inits.append(numpy_helper.from_array(np.asarray(v, dtype=dtype), name))
        return name

    def w(self, *shape: int) -> str:
        return self.const(self.rng.standard_normal(shape).astype(np.float32) / math.sqrt(shape[0]))

    def op(self, op_type: str, *ins: str, **attrs: Any) -> str:
        from onnx import helper

        self.n += 1
        out = f"t{self.n}_{op_type.lower()}"
        self.nodes.append(helper.make_node(op_type, list(ins), [out], name=f"{op_type}_{self.n}", **attrs))
        return out

    def model(self, out: str, shape: tuple[int, ...]) -> bytes:
        import onnx
        from onnx import TensorProto, helper

        g = helper.make_graph(self.nodes, "pattern", self.inputs,
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, list(shape))], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m.SerializeToString()


def gelu_erf(g: G, x: str) -> str:
    e = g.op("Erf", g.op("Div", x, g.const(math.sqrt(2.0))))
    return g.op("Mul", g.op("Mul", x, g.op("Add", e, g.const(1.0))), g.const(0.5))


def gelu_tanh(g: G, x: str) -> str:
    x3 = g.op("Mul", g.op("Mul", x, x), x)
    inner = g.op("Mul", g.op("Add", g.op("Mul", x3, g.const(0.044715)), x), g.const(math.sqrt(2 / math.pi)))
    return g.op("Mul", g.op("Mul", x, g.op("Add", g.op("Tanh", inner), g.const(1.0))), g.const(0.5))


def layernorm_decomposed(g: G, x: str) -> str:
    mean = g.op("ReduceMean", x, axes=[-1], keepdims=1)
    d = g.op("Sub", x, mean)
    var = g.op("ReduceMean", g.op("Pow", d, g.const(2.0)), axes=[-1], keepdims=1)
    y = g.op("Div", d, g.op("Sqrt", g.op("Add", var, g.const(1e-5))))
    return g.op("Add", g.op("Mul", y, g.const(np.ones(C))), g.const(np.zeros(C)))


def layernorm_op(g: G, x: str) -> str:
    return g.op("LayerNormalization", x, g.const(np.ones(C)), g.const(np.zeros(C)), axis=-1, epsilon=1e-5)


def p_layernorm(decomposed: bool) -> bytes:
    g = G()
    x = g.inp("x", (1, T, C))
    return g.model((layernorm_decomposed if decomposed else layernorm_op)(g, x), (1, T, C))


def p_gelu(form: Callable[[G, str], str], bias: bool) -> bytes:
    """GELU alone, or after an fc over token rows (MatMul + bias Add, as torch exports Linear)."""
    g = G()
    x = g.inp("x", (1, T, C))
    if bias:
        x = g.op("Add", g.op("MatMul", x, g.w(C, 4 * C)), g.const(np.zeros(4 * C)))
        return g.model(form(g, x), (1, T, 4 * C))
    return g.model(form(g, x), (1, T, C))


def p_skip_layernorm(decomposed: bool) -> bytes:
    g = G()
    s = g.op("Add", g.inp("x", (1, T, C)), g.inp("r", (1, T, C)))
    return g.model((layernorm_decomposed if decomposed else layernorm_op)(g, s), (1, T, C))


def p_matmul_scale(op_type: str) -> bytes:
    """Attention scores: q @ k^T then the 1/sqrt(d) scale (Mul or Div), then Softmax."""
    g = G()
    s = g.op("MatMul", g.inp("q", (1, H, T, D)), g.inp("kt", (1, H, D, T)))
    s = g.op(op_type, s, g.const(1 / 8 if op_type == "Mul" else 8.0))
    return g.model(g.op("Softmax", s, axis=-1), (1, H, T, T))


def p_torch_gelu_tanh() -> bytes:
    """GELU(approximate='tanh') as torch exports it (constants first in Mul and Add)."""
    import io

    import torch

    buf = io.BytesIO()
    torch.onnx.export(torch.nn.GELU(approximate="tanh"), (torch.randn(1, T, C),), buf, opset_version=17,
                      dynamo=False)
    return buf.getvalue()


def p_attention() -> bytes:
    """One ViT block as torch exports it (timm's Attention and Mlp, pre-norm, GELU erf)."""
    import io

    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc1, self.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            qkv = self.qkv(self.n1(x)).reshape(b, t, 3, H, D).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            a = ((q * D ** -0.5) @ k.transpose(-2, -1)).softmax(dim=-1)
            x = x + self.proj((a @ v).transpose(1, 2).reshape(b, t, c))
            return x + self.fc2(nn.functional.gelu(self.fc1(self.n2(x))))

    buf = io.BytesIO()
    torch.onnx.export(Block().eval(), (torch.randn(1, T, C),), buf, opset_version=17, dynamo=False)
    return buf.getvalue()


def p_act(producer: str, kind: str) -> bytes:
    """A producer (conv 3x3 64->64 at 28x28, Gemm 1x512->512, MatMul + bias over 197 token
    rows, Add, MatMul of two activations) followed by an activation in bench.modelgen's form."""
    from bench.modelgen import _onnx_act

    g = G()
    if producer == "conv":
        y = g.op("Conv", g.inp("x", (1, 64, 28, 28)), g.w(64, 64, 3, 3), g.const(np.zeros(64)), pads=[1, 1, 1, 1])
        shape: tuple[int, ...] = (1, 64, 28, 28)
    elif producer == "gemm":
        y = g.op("Gemm", g.inp("x", (1, 512)), g.w(512, 512), g.const(np.zeros(512)), transB=1)
        shape = (1, 512)
    elif producer == "fc-rows":
        y = g.op("Add", g.op("MatMul", g.inp("x", (1, T, C)), g.w(C, 4 * C)), g.const(np.zeros(4 * C)))
        shape = (1, T, 4 * C)
    elif producer == "add":
        y = g.op("Add", g.inp("x", (1, 64, 28, 28)), g.inp("r", (1, 64, 28, 28)))
        shape = (1, 64, 28, 28)
    elif producer == "matmul":
        y = g.op("MatMul", g.inp("q", (1, H, T, D)), g.inp("kt", (1, H, D, T)))
        shape = (1, H, T, T)
    else:
        raise ValueError(producer)
    inits: list[Any] = []
    c = shape[1]
    nodes = _onnx_act(kind, y, "y", "act", {}, inits, {"slope": np.full(c, 0.25, np.float32)}, c, len(shape))
    g.nodes += nodes
    g.inits += inits
    return g.model("y", shape)


PATTERNS: dict[str, Callable[[], bytes]] = {
    "layernorm (LayerNormalization, opset 17)": lambda: p_layernorm(False),
    "layernorm (ReduceMean/Sub/Pow/Sqrt/Div)": lambda: p_layernorm(True),
    "gelu (Erf form)": lambda: p_gelu(gelu_erf, False),
    "gelu (tanh form)": lambda: p_gelu(gelu_tanh, False),
    "gelu (tanh form, torch export)": p_torch_gelu_tanh,
    "fc rows + bias + gelu (Erf form)": lambda: p_gelu(gelu_erf, True),
    "fc rows + bias + gelu (tanh form)": lambda: p_gelu(gelu_tanh, True),
    "add + layernorm (LayerNormalization)": lambda: p_skip_layernorm(False),
    "add + layernorm (decomposed)": lambda: p_skip_layernorm(True),
    "matmul + Mul scale + softmax": lambda: p_matmul_scale("Mul"),
    "matmul + Div scale + softmax": lambda: p_matmul_scale("Div"),
    "vit block (torch export)": p_attention,
}

ACT_KINDS = ("relu", "relu6", "clip", "sigmoid", "hardsigmoid", "hardswish", "silu", "tanh", "leakyrelu", "prelu",
             "elu", "gelu", "mish", "softplus")
PRODUCERS = ("conv", "gemm", "fc-rows", "add", "matmul")


def optimised_nodes(model: bytes, level: str) -> list[tuple[str, str]]:
    """(node name, op_type[domain]) of the graph ONNX Runtime runs, 1 thread."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as d:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, {
            "disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
            "all": "ORT_ENABLE_ALL"}[level])
        so.optimized_model_filepath = os.path.join(d, "opt.onnx")
        so.log_severity_level = 3
        ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        m = onnx.load(so.optimized_model_filepath)
    return [(n.name, n.op_type + (f"[{n.domain}]" if n.domain else "")) for n in m.graph.node]


def show(label: str, model: bytes, runner: Any, level: str, runs: int) -> str:
    nodes = optimised_nodes(model, level)
    per = runner.per_layer(runner.prepare(model), warmup=3, runs=runs)
    ops = {n: t for n, t in nodes}
    kernels = [f"{ops.get(n, '?')} {ms * 1000:.0f}us" for n, ms in per.items()]
    return f"{label}: {len(nodes)} node(s): {', '.join(t for _, t in nodes)}\n    kernels: {', '.join(kernels)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--level", default="all", choices=("disable", "basic", "extended", "all"))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--only", default=None, help="patterns whose label contains this")
    ap.add_argument("--acts", action="store_true", help="also every producer + activation kind (compact: op types)")
    a = ap.parse_args(argv)
    import onnxruntime as ort

    print(f"onnxruntime {ort.__version__}, graph optimisation {a.level}, 1 thread")
    runner = get_runner("onnxruntime", threads=1, graph_optimization=a.level)
    with runner:
        for label, build in PATTERNS.items():
            if a.only and a.only not in label:
                continue
            try:
                print(show(label, build(), runner, a.level, a.runs))
            except ImportError as e:
                print(f"{label}: skipped ({e})")
        if a.acts:
            for prod in PRODUCERS:
                for kind in ACT_KINDS:
                    nodes = optimised_nodes(p_act(prod, kind), a.level)
                    print(f"{prod} + {kind}: " + ", ".join(t for _, t in nodes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
