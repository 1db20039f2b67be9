"""Profiles from benchmark databases: the library behind ``bench profile`` (:mod:`bench.cmd_profile`)
and ``bench adapt``.

:func:`profile_from_db` takes the rows of one environment of a ``bench run`` database, writes
them as ``<root>/<NAME>/measurements.csv`` and the metadata as ``<root>/<NAME>/profile.json``
(:func:`estimator.profile.create_profile`), with provenance from the environment record
(runner, versions, host, date; kind ``measured``, or ``estimated`` for a cost model such as
Vela) and ``source`` as the human-readable text of where the numbers came from; cold rows
(``cold_from``) and the runner's default fusion rules and op mapping (below) as
``bench profile`` documents them.
"""
from __future__ import annotations

import json
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

from estimator.errors import UserError

from .runners.base import CACHE_KEYS

__all__ = ["runtime_fusion", "onnxruntime_fusion", "onnxruntime_op_mapping", "litert_fusion", "litert_op_mapping", "vela_fusion", "vela_op_mapping", "profile_from_db"]


def runtime_fusion(runtime: str) -> dict[str, Any]:
    """The default fusion rules of ``runtime`` (a profile's runner): each producer type's
    activations on it (:attr:`~estimator.layers.registry.LayerTypeSpec.fused_activations`, in
    the type's module, with the kinds and why), a BN folded into a preceding convolution, an
    activation folded only into a producer whose output it alone reads."""
    from estimator.layers import SPECS  # noqa: PLC0415

    acts = {t: list(s.fused_activations[runtime]) for t, s in SPECS.items() if runtime in s.fused_activations}
    return {"activations": acts, "bn_into_conv": True, "single_consumer": True}


def onnxruntime_fusion() -> dict[str, Any]:
    """Fusion rules of ONNX Runtime's CPU execution provider at graph optimisation 'all'
    (:func:`runtime_fusion`): Conv + {Relu, Clip, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish} become one
    kernel (MLAS applies ReLU inside the kernel and the others as a pass over its output,
    which the ``act`` feature tells apart); Gemm + an activation become one kernel; an Add
    followed by Relu is measured as one LUM (Table 2) and folds into the producing
    convolution's sum input. SiLU (x * sigmoid(x)) stays a kernel of its own (ONNX Runtime
    turns it into one QuickGelu kernel, not part of the convolution's).

    HardSwish, measured with ONNX Runtime 1.32.0: Conv -> HardSwish -> Conv profiles as
    two NCHWc conv kernels and no HardSwish kernel, and in the ``mobilenet`` NAS space's
    samples none of a network's HardSwish nodes runs as a kernel. Where it is left out of
    the rules (a profile's ``fusion`` written without it), each
    HardSwish is estimated as a standalone activation layer, which smart padding measures
    unfused (after the padding convolution's own ReLU: HardSigmoid + Mul kernels): in one
    sample 1.79 ms of a 4.92 ms estimate went to layers that cost nothing as kernels."""
    return runtime_fusion("onnxruntime")

#: ONNX ops ONNX Runtime's CPU execution provider runs as views of their input: their
#: kernels alias the input buffer (no data moved). Measured with ONNX Runtime 1.32.0
#: (``taskset -c 1``, per-node profile of synthetic graphs): Reshape, Flatten,
#: Squeeze and Unsqueeze kernels take 2-4 us whatever the tensor (64 x 56 x 56 included),
#: where a copy of that tensor takes 25 us or more. The layout reorders ONNX Runtime puts
#: around them, when their neighbours run in its blocked (NCHWc) layout, are kernels of
#: their own, not theirs. The roofline fallback (these types have no benchmark rows)
#: predicted about 16 us each: ShuffleNetV2's 32 reshapes 0.51 ms of a 4.4 ms estimate
#: against 0.08 ms measured.
_ORT_FREE = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def onnxruntime_op_mapping() -> dict[str, Any]:
    """``op_mapping`` for an ONNX Runtime (CPU) profile: the ops it runs as views
    (:data:`_ORT_FREE`), which the estimator lists as free nodes instead of estimating."""
    import onnxruntime  # noqa: PLC0415

    return {"free_ops": list(_ORT_FREE),
            "source": f"onnxruntime {onnxruntime.__version__} CPU execution provider: Reshape, Flatten, Squeeze "
                      f"and Unsqueeze alias their input (per-node kernel times 2-4 us whatever the size)"}


def litert_fusion() -> dict[str, Any]:
    """Fusion rules of LiteRT on the host (XNNPACK) for networks converted by
    :mod:`bench.tflite_convert` (:func:`runtime_fusion`; the kinds and why:
    :data:`estimator.layers.shared.LITERT_CLAMP_ACTS`)."""
    return runtime_fusion("litert")


def litert_op_mapping(versions: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``op_mapping`` for a LiteRT (XNNPACK) profile: reshapes cost nothing there, as on ONNX
    Runtime (:data:`_ORT_FREE`). Measured with smart padding (LiteRT 2.3.0, fp32, 1 thread,
    an AMD EPYC VM): 23-30 ``reshape`` rows per 10-minute profile, from 200 to 3.7 M elements,
    all within their padding pair's noise (0.02 ms at 3.7 M elements, where copying those
    14.8 MB takes milliseconds). Estimated instead, the rows' noise gave each of ShuffleNetV2's
    32 reshapes a 90 % upper bound 50 times its estimate (the network's band 537 % wide).
    ``versions``: the measuring environment's runtime versions, named in ``source``."""
    runtime = " ".join(f"{k} {v}" for k, v in sorted((versions or {}).items())
                       if k in ("ai_edge_litert", "tflite_runtime")) or "LiteRT"
    return {"free_ops": list(_ORT_FREE),
            "source": f"{runtime} (XNNPACK): Reshape, Flatten, Squeeze and Unsqueeze within their padding pair's "
                      "noise up to 3.7 M elements (smart padding)"}


def vela_fusion() -> dict[str, Any]:
    """Fusion rules of Vela for an Ethos-U target (:func:`runtime_fusion`; the kinds and why:
    :data:`estimator.layers.shared.VELA_FUSED_ACTS`)."""
    return runtime_fusion("vela")


#: ONNX op -> the TFLite operator (Vela's ``Op`` name) it becomes; ops whose operator is not
#: in Vela's supported-operator set run on the CPU. Only unambiguous mappings are listed.
_ONNX_TO_VELA_OP = {
    "Elu": "Elu", "Sqrt": "Sqrt", "Log": "Log", "Sin": "Sin", "Cos": "Cos", "Floor": "Floor", "Ceil": "Ceil",
    "Round": "Round", "Cast": "Cast", "Gather": "Gather", "GatherElements": "Gather", "GatherND": "GatherNd",
    "Equal": "Equal", "Greater": "Greater", "Less": "Less", "Not": "LogicalNot", "And": "LogicalAnd",
    "Or": "LogicalOr", "Where": "Select", "TopK": "TopKV2", "NonMaxSuppression": "NonMaxSuppressionV4",
    "Tile": "Tile", "Erf": "Erf", "LogSoftmax": "LogSoftmax", "LRN": "LocalResponseNormalization",
    "ReduceProd": "ReduceProduct", "ArgMin": "ArgMin", "DepthToSpace": "DepthToSpace",
    "SpaceToDepth": "SpaceToDepth", "ScatterND": "ScatterNd", "CumSum": "Cumsum", "Range": "Range",
    "OneHot": "OneHot", "Sign": "Sign", "Reciprocal": "Div", "Expand": "BroadcastTo",
    "Relu": "Relu", "Conv": "Conv2DBias", "Add": "Add", "Mul": "Mul", "Concat": "ConcatTFLite",
    "MaxPool": "MaxPool", "AveragePool": "AvgPool", "Gemm": "FullyConnected", "Sigmoid": "Sigmoid",
    "Tanh": "Tanh", "HardSwish": "HardSwish", "LeakyRelu": "LeakyRelu", "Softmax": "Softmax",
    "Slice": "StridedSlice", "Split": "SplitV", "Reshape": "Reshape", "Exp": "Exp", "Abs": "Abs",
    "Sub": "Sub", "Max": "Maximum", "Min": "Minimum", "GlobalAveragePool": "Mean", "ReduceMean": "Mean",
    "ReduceSum": "ReduceSum", "ArgMax": "ArgMax", "Pad": "Pad",
}

#: ONNX ops that cost nothing on Vela (views): see :func:`vela_op_mapping`.
_VELA_FREE = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Split", "Slice")

#: Operators Vela runs on the NPU only under conditions (checked per operator by Vela).
_VELA_CONDITIONAL = {
    "Transpose": "TRANSPOSE runs on the NPU only for the permutations Vela supports (rank 2 WxC->CxW; "
                 "rank 3 HxWxC->WxHxC and 1xWxC->1xCxW; rank 4 1xHxWxC->1xWxHxC, 1x1xWxC->1x1xCxW, "
                 "1xHx1xC->1xCx1xW); others run on the CPU (e.g. a YOLO head's 5-D permute)",
    "Resize": "RESIZE_NEAREST_NEIGHBOR/BILINEAR run on the NPU for upscaling by supported integer factors; "
              "other scales (e.g. 8->13, downscaling) run on the CPU",
    "AveragePool": "AVERAGE_POOL_2D with SAME padding runs on the NPU for kernels up to 8x8 (VALID: height up "
                   "to 256, area up to 65536); larger padded windows run on the CPU",
    "PRelu": "only a graph the TFLite converter matches into one PRELU op runs on the NPU; otherwise float "
             "NEG/DEQUANTIZE/QUANTIZE ops run on the CPU",
    "Div": "a constant divisor becomes MUL (NPU); a tensor/tensor DIV runs on the CPU",
    "Pow": "exponent 2 becomes MUL (NPU); other exponents (POW) run on the CPU",
}


def vela_op_mapping(failures: list[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """``op_mapping`` for a Vela profile: ONNX ops whose TFLite operator is outside the
    installed Vela's supported-operator set, conditional ones, and the benchmark
    configurations Vela left on the CPU (from a database's ``failures``)."""
    from ethosu.vela.tflite_supported_operators import TFLiteSupportedOperators  # noqa: PLC0415

    from .runners.vela_runner import vela_version  # noqa: PLC0415

    supported = {str(o).split(".", 1)[-1] for o in TFLiteSupportedOperators.supported_operators}
    cpu = sorted(onnx_op for onnx_op, vop in _ONNX_TO_VELA_OP.items()
                 if vop not in supported and onnx_op not in _VELA_CONDITIONAL)
    bench_cpu: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for f in failures or []:
        err = str(f.get("error", ""))
        if "placed on the CPU" not in err and "placed no operator on the NPU" not in err:
            continue
        if "CPU operators: none" in err:  # an empty model (e.g. a 1x1 global pool the converter removed)
            continue
        params = f.get("params")
        if isinstance(params, str):
            try:
                params = json.loads(params)
            except ValueError:
                params = {}
        kind = (params or {}).get("kind") or (params or {}).get("mode")
        key = f"{f.get('layer_type')}" + (f" ({kind})" if kind else "")
        bench_cpu[key] += 1
        m = re.search(r"excludes \(not benchmarkable on this target\): (.*)", err) or re.search(
            r"\((CPU operators: [^)]*)\)", err)
        examples.setdefault(key, (m.group(1) if m else err)[:300])
    out: dict[str, Any] = {
        "cpu_fallback_ops": cpu,
        "conditional_cpu_ops": dict(_VELA_CONDITIONAL),
        # Vela turns these into views of their input (RESHAPE is removed; SPLIT/SLICE become
        # reads at an offset by the consumer): no cycles of their own in its per-layer report.
        "free_ops": list(_VELA_FREE),
        "source": f"ethos-u-vela {vela_version()}: TFLiteSupportedOperators.supported_operators and its "
                  "per-operator constraints; ONNX ops mapped to the TFLite operators bench.tflite_convert emits",
        "notes": "Vela gives operators it leaves on the CPU no time in its estimate; on the board they run on the "
                 "Cortex-A55 through TFLite's CPU kernels. The estimator predicts them with its roofline "
                 "fallback (flagged out_of_design_space) and flags ops listed in cpu_fallback_ops.",
    }
    if bench_cpu:
        out["benchmark_cpu_placements"] = {k: {"configurations": n, "example": examples[k]}
                                           for k, n in sorted(bench_cpu.items())}
    return out


def _cold_rows(store: Any, db: Any, env: Mapping[str, Any], envs: Sequence[Mapping[str, Any]], env_id: int,
               types: Sequence[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The weight-bound ``types`` rows of environment ``env_id`` marked ``cold=1``, and the
    ``cold_rows`` record. An environment that is not a cache-flushed copy of ``env`` (it
    differs in more than :data:`CACHE_KEYS` or in its measurement settings, or flushes
    nothing where ``env`` does not either), or holds no weight-bound row of a type, is an error."""
    from estimator.layers import describe, weight_bound  # noqa: PLC0415

    other = next((e for e in envs if e["env_id"] == env_id), None)
    if other is None:
        raise UserError(f"--cold-from {env_id}: {db} has no environment {env_id}")
    a, b = env.get("environment") or {}, other.get("environment") or {}
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and k not in CACHE_KEYS)
    sa, sb = env.get("settings") or {}, other.get("settings") or {}
    differ += sorted(f"settings.{k}" for k in set(sa) | set(sb) if sa.get(k) != sb.get(k) and k != "bench_version")
    if differ:
        raise UserError(f"--cold-from {env_id}: environment {env_id} differs from environment {env['env_id']} in "
                        f"{', '.join(differ)}; only {', '.join(sorted(CACHE_KEYS))} may differ")
    if not b.get("flush_cache_mb") or a.get("flush_cache_mb"):
        raise UserError(f"--cold-from {env_id}: environment {env_id} must be measured with a cache flush "
                        f"(bench run --flush-cache 64) and environment {env['env_id']} without one")
    rows: list[dict[str, Any]] = []
    for r in store.export_rows(env_id):
        if r["layer_type"] not in types:
            continue
        params = json.loads(r["params"]) if isinstance(r["params"], str) else dict(r["params"])
        if weight_bound(describe(r["layer_type"], params)):
            rows.append({**r, "params": json.dumps({**params, "cold": 1}, sort_keys=True, separators=(",", ":"))})
    lacking = sorted(set(types) - {r["layer_type"] for r in rows})
    if lacking:
        raise UserError(f"--cold-from {env_id}: environment {env_id} holds no weight-bound {', '.join(lacking)} rows")
    record = {t: {"env_id": env_id, "rows": sum(1 for r in rows if r["layer_type"] == t),
                  "flush_cache_mb": b.get("flush_cache_mb")} for t in types}
    return rows, record


def profile_from_db(db: str | Path, name: str, *, source: str, root: str | Path | None = None,
                    env_id: int | None = None, cold_from: tuple[int, Sequence[str]] | None = None,
                    hardware: str | None = None, description: str | None = None,
                    fusion: Mapping[str, Any] | None = None, op_mapping: Mapping[str, Any] | None = None,
                    training: Mapping[str, Any] | None = None, force: bool = False) -> Any:
    """Create ``<root>/<name>/`` from one environment of a bench database; returns the Profile."""
    from estimator.dataset import write_measurements  # noqa: PLC0415
    from estimator.profile import create_profile, default_root, load_profile, staged_profile  # noqa: PLC0415

    from .storage import Store  # noqa: PLC0415

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise UserError(f"--name {name!r}: use letters, digits, '.', '_' and '-' only")
    if not str(source).strip():
        raise UserError("--source is empty: say where the numbers came from (the machine, the command, the date)")
    root_p = Path(root) if root is not None else default_root()
    target = root_p / name
    if (target / "profile.json").exists() and not force:
        raise UserError(f"{target} already exists (use --force to replace it)")
    with Store.open_existing(db) as store:
        envs = store.environments()
        counts = {e["env_id"]: store.count(e["env_id"]) for e in envs}
        if env_id is None:
            with_rows = [e for e in envs if counts[e["env_id"]]]
            if not with_rows:
                raise UserError(f"{db}: the database holds no measurements yet (bench run --out {db})")
            if len(with_rows) != 1:
                listing = ", ".join(f"{e['env_id']} ({e['device']}, {e['runner']}, {counts[e['env_id']]} rows)"
                                    for e in envs) or "none"
                raise UserError(f"{db}: {len(with_rows)} environments hold rows; choose one with --env-id "
                                f"(environments: {listing})")
            env = with_rows[0]
        else:
            env = next((e for e in envs if e["env_id"] == env_id), None)
            if env is None:
                raise UserError(f"{db}: no environment {env_id} (have {', '.join(str(e['env_id']) for e in envs)})")
        rows = store.export_rows(env["env_id"])
        if not rows:
            raise UserError(f"{db}: environment {env['env_id']} holds no measurements")
        failures = [f for f in store.failures() if f["env_id"] == env["env_id"]]
        cold: dict[str, Any] = {}
        if cold_from:
            cold_rows, cold = _cold_rows(store, db, env, envs, *cold_from)
            rows = rows + cold_rows
    extra: dict[str, Any] = {}
    if cold:
        extra["cold_rows"] = cold
    runner = env.get("runner")
    if fusion is None and runner == "vela":
        fusion = vela_fusion()
    elif fusion is None and runner == "onnxruntime":
        fusion = onnxruntime_fusion()
    elif fusion is None and runner == "litert":
        fusion = litert_fusion()
    if op_mapping is None and runner == "vela":
        op_mapping = vela_op_mapping(failures)
    elif op_mapping is None and runner == "onnxruntime":
        op_mapping = onnxruntime_op_mapping()
    elif op_mapping is None and runner == "litert":
        op_mapping = litert_op_mapping(env.get("versions"))
    if fusion is not None:
        extra["fusion"] = dict(fusion)
    if op_mapping is not None:
        extra["op_mapping"] = dict(op_mapping)
    if training:
        extra["training"] = dict(training)
    from estimator.fingerprint import from_environment  # noqa: PLC0415

    extra["fingerprint"] = from_environment(str(runner), env.get("host"), env.get("versions"), env.get("threads"))
    if description:
        extra["description"] = description
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        csv_path = Path(tmp) / "measurements.csv"
        write_measurements(csv_path, rows)
        side = Path(tmp) / "measurements.csv.provenance.json"
        side.write_text(json.dumps({"source": str(db), "environments": [env]}, default=str))
        try:
            # written beside the old profile and swapped in whole: a profile that fails to write
            # (an empty --source, bad training options) leaves the old one as it was
            with staged_profile(root_p, name, "profile") as stage:
                create_profile(stage.parent, name, csv_path, source=source, provenance_json=side, hardware=hardware,
                               **extra)
        except OSError as e:
            raise UserError(f"cannot write profile {name} under {root_p}: {e.strerror or e}") from None
        except UserError as e:  # (its message names the staging folder: name the profile instead)
            raise UserError(re.sub(rf"\.profile-{re.escape(name)}-\d+[/\\]", "", str(e))) from None
    return load_profile(target)
