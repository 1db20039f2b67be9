"""``estimator layers`` through the real CLI: output, and bad input -> one line, non-zero exit."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from estimator import cli, zoo
from tests.torch_counts import count

ROOT = Path(__file__).resolve().parents[1]
NEWEST_OPSET = onnx.defs.onnx_opset_version()


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "estimator.cli", "layers", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def assert_one_line_error(p: subprocess.CompletedProcess, *fragments: str) -> str:
    assert p.returncode != 0
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout
    err = p.stderr.strip()
    assert err.count("\n") == 0, err
    assert err.startswith("estimator: error: "), err
    for f in fragments:
        assert f in err, err
    return err


def small_model(opset: int, *, dynamic: bool = False, custom_op: bool = False) -> onnx.ModelProto:
    """Conv+Clip(0,6) -> MaxPool -> Resize x2 -> Concat -> ReduceMean(H, W) -> Flatten -> Gemm -> Softmax,
    written with the input forms each opset requires."""
    rng = np.random.default_rng(opset)
    inits = [
        numpy_helper.from_array(rng.random((8, 3, 3, 3), dtype=np.float32), "w"),
        numpy_helper.from_array(np.zeros(8, np.float32), "b"),
        numpy_helper.from_array(np.array(0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6, np.float32), "hi"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        numpy_helper.from_array(np.zeros(0, np.float32), "roi"),
        numpy_helper.from_array(rng.random((10, 16), dtype=np.float32), "fw"),
        numpy_helper.from_array(np.zeros(10, np.float32), "fb"),
    ]
    N = helper.make_node
    nodes = [
        N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        N("Clip", ["c", "lo", "hi"], ["r"], name="relu6"),
        N("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        N("Resize", ["p", "roi" if opset < 13 else "", "scales"], ["u"], mode="nearest", name="upsample"),
        N("Concat", ["u", "r"], ["cat"], axis=1, name="concat"),
    ]
    if custom_op:
        nodes.append(N("FancyNorm", ["cat"], ["cat2"], domain="com.example", name="fancy"))
    src = "cat2" if custom_op else "cat"
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.array([2, 3], np.int64), "axes"))
        nodes.append(N("ReduceMean", [src, "axes"], ["gm"], keepdims=1, name="gap"))
    else:
        nodes.append(N("ReduceMean", [src], ["gm"], axes=[2, 3], keepdims=1, name="gap"))
    nodes += [N("Flatten", ["gm"], ["f"], name="flatten"),
              N("Gemm", ["f", "fw", "fb"], ["g"], transB=1, name="fc"),
              N("Softmax", ["g"], ["y"], axis=1, name="softmax")]
    x_dims = ["batch", 3, "height", "width"] if dynamic else [1, 3, 16, 16]
    g = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    if custom_op:
        g.value_info.append(helper.make_tensor_value_info("cat2", TensorProto.FLOAT, [1, 16, 16, 16]))
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.example", 1)] if custom_op else [])
    return helper.make_model(g, opset_imports=opsets)


EXPECTED = [("conv2d", "relu6"), ("maxpool", None), ("resize", None), ("concat", None), ("globalpool", None),
            ("reshape", None), ("fc", None), ("softmax", None)]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cli")
    real = zoo.export_onnx("mobilenet_v1", 64)
    paths = {
        "real": d / "mobilenet_v1.onnx",
        "truncated": d / "truncated.onnx",
        "empty": d / "empty.onnx",
        "text": d / "readme.onnx",
        "dynamic": d / "dynamic.onnx",
        "custom": d / "custom.onnx",
    }
    paths["real"].write_bytes(real)
    paths["truncated"].write_bytes(real[: len(real) * 2 // 3])
    paths["empty"].write_bytes(b"")
    paths["text"].write_text("This is not an ONNX model.\n")
    onnx.save(small_model(17, dynamic=True), paths["dynamic"])
    onnx.save(small_model(17, custom_op=True), paths["custom"])
    return paths


def test_table_output(files):
    p = run_cli(str(files["real"]))
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    lines = p.stdout.splitlines()
    assert lines[0].startswith(f"{files['real']}: opset 17, inputs input 1x3x64x64, simplified with onnxsim")
    assert lines[1].split() == ["#", "name", "type", "features", "MACs", "params", "act", "flags"]
    assert "dwconv2d" in p.stdout and "relu" in p.stdout
    totals = next(line for line in lines if line.startswith("totals: "))
    tc = count(zoo.build("mobilenet_v1", 64), (1, 3, 64, 64))
    assert f"30 layers, {tc.macs / 1e6:.2f}M MACs ({tc.macs}), " in totals
    assert f"params ({tc.params})" in totals
    assert len(lines) == 2 + 30 + 1  # title, header, one row per layer, totals: no warnings
    assert "other (outside" not in p.stdout


def run_main(capsys, *args: str) -> dict:
    """The CLI's entry point in this process (same code path, no interpreter start-up)."""
    assert cli.main(["layers", *args]) == 0
    out = capsys.readouterr().out
    return json.loads(out) if "--json" in args else {"stdout": out}


def test_json_output(files, capsys):
    d = run_main(capsys, str(files["real"]), "--json")
    assert d["file"] == str(files["real"]) and d["simplified"] is True
    assert d["inputs"] == {"input": [1, 3, 64, 64]}
    assert d["totals"]["layers"] == len(d["layers"]) == 30
    assert d["totals"]["macs"] == sum(la["macs"] for la in d["layers"])
    assert {la["type"] for la in d["layers"]} == {"conv2d", "dwconv2d", "globalpool", "reshape", "fc"}
    assert d["other_ops"] == [] and d["warnings"] == []


def test_no_simplify_and_input_shape(files, capsys):
    d = run_main(capsys, str(files["dynamic"]), "--input-shape", "x:1x3x32x32", "--no-simplify", "--json")
    assert d["simplified"] is False and d["inputs"] == {"x": [1, 3, 32, 32]}
    assert [(la["type"], la["activation"]) for la in d["layers"]] == EXPECTED
    out = run_main(capsys, str(files["dynamic"]), "--input-shape", "2x3x32x32")["stdout"]
    assert "batch_gt_1" in out and "warning: batch > 1" in out


def test_unknown_operator_is_kept_and_listed(files, capsys):
    p = run_cli(str(files["custom"]))
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    assert "other:com.example:FancyNorm" in p.stdout
    assert "other (outside the layer vocabulary): 1 layer(s)" in p.stdout
    assert "  com.example:FancyNorm: fancy" in p.stdout
    d = run_main(capsys, str(files["custom"]), "--json")
    assert d["other_ops"] == ["com.example:FancyNorm"]
    (fancy,) = [la for la in d["layers"] if la["type"] == "other"]
    assert "unknown_op" in fancy["flags"] and fancy["op_type"] == "com.example:FancyNorm"
    assert len(d["layers"]) == len(EXPECTED) + 1


@pytest.mark.parametrize("key,fragments", [
    ("text", ["readme.onnx: not a valid ONNX model", "truncated or not ONNX"]),
    ("truncated", ["truncated.onnx: not a valid ONNX model", "truncated or not ONNX"]),
    ("empty", ["empty.onnx: empty (0 bytes), not an ONNX model"]),
    ("dynamic", ["dynamic input dimensions: 'x' [batch, 3, height, width]", "--input-shape 1x3x1x1"]),
])
def test_bad_files(files, key, fragments):
    assert_one_line_error(run_cli(str(files[key])), *fragments)


def test_missing_file(tmp_path):
    assert_one_line_error(run_cli(str(tmp_path / "nope.onnx")), "nope.onnx: no such file")


@pytest.mark.parametrize("args,fragments", [
    (["--input-shape", "1x3xfoo"], ["bad input shape '1x3xfoo'"]),
    (["--input-shape", "y:1x3x16x16"], ["unknown input 'y'; the model's inputs are: x"]),
    (["--input-shape", "1x3x16"], ["rank 4", "rank 3"]),
    (["--input-shape", "x:1x3x8x8", "--input-shape", "x:1x3x16x16"], ["given twice for input 'x'"]),
])
def test_bad_input_shapes(files, args, fragments):
    assert_one_line_error(run_cli(str(files["dynamic"]), *args), *fragments)


@pytest.mark.parametrize("opset", list(range(11, NEWEST_OPSET + 1)))
def test_every_opset_from_11_to_newest(opset, tmp_path, capsys):
    path = tmp_path / f"opset{opset}.onnx"
    onnx.save(small_model(opset), path)
    d = run_main(capsys, str(path), "--json")
    assert d["opset"] == opset
    assert [(la["type"], la["activation"]) for la in d["layers"]] == EXPECTED
    assert d["totals"]["macs"] == 16 * 16 * 8 * 27 + 16 * 10


@pytest.mark.parametrize("opset", [11, NEWEST_OPSET])
def test_oldest_and_newest_opset_in_a_subprocess(opset, tmp_path):
    path = tmp_path / f"opset{opset}.onnx"
    onnx.save(small_model(opset), path)
    p = run_cli(str(path), "--json")
    assert p.returncode == 0, p.stderr
    assert [(la["type"], la["activation"]) for la in json.loads(p.stdout)["layers"]] == EXPECTED


def test_zoo_reference_needs_no_file(capsys):
    d = run_main(capsys, "zoo:squeezenet@64", "--json")
    want = count(zoo.build("squeezenet", 64), (1, 3, 64, 64))
    assert d["totals"]["macs"] == want.macs


@pytest.mark.parametrize("ref,fragment", [("zoo:nope", "unknown zoo network 'nope'"),
                                          ("zoo:resnet18@abc", "zoo resolution must be an integer"),
                                          ("zoo:resnet18@8", "zoo resolution must be in")])
def test_bad_zoo_reference(capsys, ref, fragment):
    assert cli.main(["layers", ref]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and fragment in err
