"""The networks of the seed paper's i.MX93 board table (YOLOv5s/m/l, YOLOv8n/s/m/l/x,
MobileNetV1, Inception-v4): they build, match the published parameter counts, export to
ONNX with every node accounted for by the importer, and estimate through the Python API.

Built at small resolutions to stay fast; the parameter counts do not depend on it."""
from __future__ import annotations

import functools
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from estimator import zoo  # noqa: E402
from tests.zoo_checks import import_every_node  # noqa: E402

from . import synthetic  # noqa: E402

# name -> (default resolution, test resolution, published parameter count)
BOARD: dict[str, tuple[int, int, float]] = {
    "yolov5s": (640, 128, 7.2e6),   # Ultralytics YOLOv5 README (v6.0+)
    "yolov5m": (640, 128, 21.2e6),
    "yolov5l": (640, 128, 46.5e6),
    "yolov8n": (640, 128, 3.2e6),   # Ultralytics YOLOv8 detection table
    "yolov8s": (640, 128, 11.2e6),
    "yolov8m": (640, 128, 25.9e6),
    "yolov8l": (640, 128, 43.7e6),
    "yolov8x": (640, 128, 68.2e6),
    "mobilenet_v1": (224, 96, 4.2e6),  # Howard et al. 2017
    "inception_v4": (299, 107, 42.7e6),  # timm / Cadene pretrainedmodels
}


def _out_shape(name: str, res: int) -> tuple[int, ...]:
    anchors = sum((res // s) ** 2 for s in (8, 16, 32))
    if name.startswith("yolov5"):
        return (1, 3 * anchors, 85)
    if name.startswith("yolov8"):
        return (1, 84, anchors)
    return (1, 1000)


@functools.lru_cache(maxsize=None)
def _onnx(name: str) -> bytes:
    return zoo.export_onnx(name, BOARD[name][1])


@pytest.mark.parametrize("name", list(BOARD))
def test_builds_runs_and_matches_the_published_count(name):
    default, res, published = BOARD[name]
    assert name in zoo.names()
    assert zoo.default_resolution(name) == default
    module = zoo.build(name, res)
    with torch.no_grad():
        out = module(torch.randn(1, 3, res, res))
    assert tuple(out.shape) == _out_shape(name, res)
    assert torch.isfinite(out).all()
    n = zoo.param_count(module)
    assert abs(n / published - 1) < 0.03, n


def test_yolov8_decodes_boxes_in_pixels():
    """The DFL is a fixed expectation over 16 bins (weights 0..15), and the decoded boxes
    are centred within the image: a softmax expectation lies in [0, 15] grid cells."""
    res = 64
    module = zoo.build("yolov8n", res)
    assert module.detect.dfl.weight.flatten().tolist() == [float(i) for i in range(16)]
    with torch.no_grad():
        out = module(torch.randn(1, 3, res, res))
    xy, wh, cls = out[:, :2], out[:, 2:4], out[:, 4:]
    assert ((cls >= 0) & (cls <= 1)).all()
    assert (wh >= 0).all() and (wh <= 2 * 15 * 32).all()
    assert (xy >= -15 * 32).all() and (xy <= res + 15 * 32).all()


@pytest.mark.parametrize("name,res,match", [("yolov8n", 100, "divisible by 32"), ("yolov5l", 100, "divisible by 32"),
                                            ("inception_v4", 64, "at least 75")])
def test_rejects_an_impossible_resolution(name, res, match):
    with pytest.raises(zoo.ZooError, match=match):
        zoo.build(name, res)


@pytest.mark.parametrize("name", list(BOARD))
def test_exports_and_imports_every_node(name):
    res = BOARD[name][1]
    net, types, others = import_every_node(name, res, lambda: _onnx(name))
    if name.startswith("yolov5"):
        assert dict(others) == {"Pow": 3}  # the anchor decode's (wh * 2) ** 2
    else:
        assert not others, others
    if name.startswith("yolov8"):
        assert types["softmax"] == 1  # the DFL
    if name == "inception_v4":
        assert types["avgpool"] == 14 and types["conv2d"] == 149


@pytest.fixture(scope="module")
def estimator(tmp_path_factory):
    """An estimator on a synthetic conv-only profile: every other layer type goes through the
    roofline fallback, which is enough to see each network estimated whole."""
    from estimator.predict import Estimator
    from estimator.profile import load_profile

    root = tmp_path_factory.mktemp("profiles")
    synthetic.write_profile(root, "synthetic", synthetic.rows(200, seed=1, c_max=256))
    return Estimator.from_profile(load_profile("synthetic", root), cache_root=root / "cache")


@pytest.mark.parametrize("name", list(BOARD))
def test_estimates_through_the_python_api(name, estimator):
    net = estimator.estimate_network(_onnx(name), confidence=[0.9], name=name)
    assert net.name == name and math.isfinite(net.total_ms) and net.total_ms > 0
    assert abs(sum(row.prediction_ms for row in net.layers) - net.total_ms) <= 1e-9 * net.total_ms
    assert sum(row.type == "conv2d" for row in net.layers) >= 14  # MobileNetV1 has the fewest
    lo, hi = net.interval("CM_LV", 0.9)
    assert 0 <= lo <= net.total_ms <= hi
