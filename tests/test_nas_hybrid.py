"""The ``hybrid`` search space: MobileNet stages, then MobileViT stages with explicit attention.

Random samples build, run at batch 1, export through :mod:`nas.export` (opset 17) and
import with the estimator's ONNX importer; the proxies run on the smallest resolution
(where the quarter-resolution batch does not tile into patches); bad options are refused;
a short search on the shipped ``host-cpu`` profile writes its reports.
"""
from __future__ import annotations

import collections
import csv
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from nas.cli import main as nas_main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _random_samples(n: int, seed: int) -> list[Any]:
    import optuna

    from nas.spaces import hybrid

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    out = []
    for _ in range(n):
        t = study.ask()
        a = hybrid(t)
        out.append((dict(t.params), a))
        study.tell(t, 0.0)
    return out


def test_hybrid_samples_build_run_export_and_import():
    import onnxruntime as ort

    from estimator.onnx_import import load_network
    from nas.direct import direct_onnx, is_direct_space
    from nas.export import OPSET, to_onnx
    from nas.spaces import SPACES, hybrid, rebuild

    assert SPACES["hybrid"] is hybrid and not is_direct_space("hybrid", hybrid)  # the export path, not nas.direct
    samples = _random_samples(10, seed=0)
    assert {a.description["stages"][-1]["type"] for _, a in samples} == {"mobilevit"}
    n_attn = [sum(st["type"] == "mobilevit" for st in a.description["stages"]) for _, a in samples]
    assert set(n_attn) == {1, 2, 3}
    torch.manual_seed(0)
    for i, (params, a) in enumerate(samples):
        desc = a.description
        assert desc["family"] == "hybrid" and direct_onnx(desc, a.input_shape) is None
        assert a.input_shape == (1, 3, desc["resolution"], desc["resolution"])
        assert rebuild(hybrid, params).description == desc
        vit = [st for st in desc["stages"] if st["type"] == "mobilevit"]
        layers = sum(st["layers"] for st in vit)
        gelu = sum(st["layers"] for st in vit if st["mlp_activation"] == "gelu")
        x = torch.randn(a.input_shape)
        with torch.no_grad():
            ref = a.module.eval()(x)
        assert ref.shape == (1, desc["classes"])

        model = to_onnx(a.module, a.input_shape)
        assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [OPSET]
        ops = collections.Counter(n.op_type for n in model.graph.node)
        # two LayerNorms per transformer layer and one after each block's stack; exact GELU as Erf
        assert ops["LayerNormalization"] == 2 * layers + len(vit)
        assert ops["Erf"] == gelu
        assert ops["Softmax"] == layers and ops["MatMul"] == 2 * layers  # q @ k^T and attn @ v
        assert ops["Concat"] == len(vit)
        assert not ops.keys() & {"BatchNormalization", "Resize", "Gelu", "Attention"}
        if i < 2:
            got = ort.InferenceSession(model.SerializeToString()).run(None, {"input": x.numpy()})[0]
            assert abs(got - ref.numpy()).max() <= 1e-4 * max(float(ref.abs().max()), 1e-3)

        net = load_network(model)
        types = collections.Counter(l.type for l in net.layers)
        assert types["softmax"] == layers and types["matmul"] == 2 * layers
        assert types["conv2d"] > 0 and types["dwconv2d"] > 0 and types["globalpool"] == 1


def test_hybrid_proxies_on_the_smallest_resolution():
    """At 128 the proxies run at 32x32: the stride-32 map is 1x1 and the MobileViT blocks
    resize it for the 2x2 patches; the scores are finite and deterministic."""
    from nas.proxy import naswot, synflow
    from nas.spaces import hybrid, rebuild

    p: dict[str, Any] = {"resolution": 128, "width": 0.5, "activation": "silu", "n_attention": 3, "s0_depth": 1,
                         "s0_expansion": 2, "s0_kernel": 3}
    for i in (1, 2, 3):
        p.update({f"a{i}_expansion": 2, f"a{i}_dim": 72, f"a{i}_layers": 1, f"a{i}_heads": 3, f"a{i}_mlp_ratio": 2,
                  f"a{i}_mlp_act": "gelu"})
    a = rebuild(hybrid, p)

    class _T:
        user_attrs = {"input_shape": list(a.input_shape)}

    s1, s2 = naswot(a.module, _T()), naswot(a.module, _T())
    assert s1 == s2 and math.isfinite(s1)
    assert math.isfinite(synflow(a.module, _T()))


@pytest.mark.parametrize("options, match", [
    ({"resolutions": (160, 192)}, r"\[160\] not multiples of 64"),
    ({"dims": (64, 96), "heads": (3, 4)}, "64/3"),
    ({"max_attention_stages": 4}, "max_attention_stages"),
    ({"mlp_activations": ("relu",)}, "mlp_activations"),
    ({"kernels": (4,)}, "kernels"),
])
def test_hybrid_refuses_bad_options(options, match):
    import optuna

    from nas.spaces import SpaceError, hybrid

    with pytest.raises(SpaceError, match=match):
        hybrid(optuna.trial.FixedTrial({}), **options)


def test_hybrid_search_end_to_end(tmp_path, monkeypatch, capsys):
    """``nas search --space hybrid --device host-cpu --budget 40ms --trials 8`` on the shipped
    profile: every candidate is estimated and scored, and the reports are written."""
    root = tmp_path / "profiles"
    shutil.copytree(ROOT / "profiles" / "host-cpu", root / "host-cpu")
    monkeypatch.setenv("CL_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    rc = nas_main(["search", "--space", "hybrid", "--device", "host-cpu", "--budget", "40ms", "--trials", "8",
                   "--polish", "0", "--seed", "0", "--profiles", str(root), "--out", str(out), "--no-progress"])
    text = capsys.readouterr().out
    assert rc == 0
    for f in ("trials.csv", "summary.json", "summary.txt", "pareto.json", "pareto.png"):
        assert (out / f).is_file(), f
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert len(rows) == 8 and all(r["state"] == "COMPLETE" for r in rows)
    for r in rows:
        assert float(r["CM_LV_lower_ms"]) <= float(r["latency_ms"]) <= float(r["CM_LV_upper_ms"])
        assert r["feasible"] == str(int(float(r["CM_LV_upper_ms"]) <= 40.0))
        assert int(r["n_layers"]) > 50 and json.loads(r["params"])["resolution"] in (128, 192, 256, 320)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_feasible"] == sum(r["feasible"] == "1" for r in rows)
    assert summary["n_feasible"] + summary["n_rejected_by_budget"] == 8
    assert "space hybrid" in text
    assert summary["best"] is not None and summary["best"]["intervals"]["CM_LV"][1] <= 40.0
    best = json.loads((out / "best.json").read_text())
    assert best["description"]["family"] == "hybrid" and best["reestimate_matches"] is True
    assert (out / "best.onnx").is_file() and (out / "best_layers.csv").is_file()
