"""Smart padding for latency benchmarking (Algorithm 1 of the paper).

1. For every padding-only pair ``(h, w, c)`` the plan needs and the lookup table (LUT)
   lacks, build it (Fig. 5b), measure it once, and commit it to the LUT.
2. For every configuration not yet measured: build and measure the single-layer model
   (Fig. 5a, ``T_a``; kept so the paper's single-layer vs smart-padding comparison stays
   reproducible) and the padded model (Fig. 5c, ``T_c``); load ``T_b1`` and ``T_b2``
   from the LUT (``T_b1`` sums the LUM's input-side pairs, see
   :mod:`bench.modelgen`); compute ``T_LUM`` by Eq. 4 (:func:`lum_interval`); commit the
   row.

Medians are used throughout (``T_c``, ``T_b1``, ``T_b2`` are the medians of their runs).
``T_LUM`` is stored as measured, even when noise makes a bound negative for a layer far
cheaper than its padding; the interval width says how much to trust it.
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from estimator.layers import LayerSpecError

from .modelgen import HWC, ModelIR, padded_model, padding_keys, padding_model, single_layer_model, to_onnx
from .runners.base import Runner, RunnerError, Timing
from .sampling import Config
from .storage import Store

__all__ = ["LumInterval", "lum_interval", "t_b_from_lut", "render_model", "default_precision", "lum_profile_ms",
           "SmartPad", "RunStats", "needed_padding"]


@dataclass(frozen=True)
class LumInterval:
    lo: float
    hi: float

    @property
    def mid(self) -> float:
        return 0.5 * (self.lo + self.hi)

    @property
    def width(self) -> float:
        return self.hi - self.lo


def lum_interval(t_c: float, t_b1: float, t_b2: float) -> LumInterval:
    """Eq. 4: ``T_LUM = [T_c - max(T_b1, T_b2), T_c - min(T_b1, T_b2)]``."""
    return LumInterval(t_c - max(t_b1, t_b2), t_c - min(t_b1, t_b2))


def t_b_from_lut(lut: Mapping[HWC, Timing], layer_type: str, params: Mapping[str, Any], model_format: str = "onnx"
                 ) -> tuple[float, float, tuple[HWC, ...], HWC]:
    """``(T_b1, T_b2, input keys, output key)`` of a LUM from a padding LUT (medians)."""
    keys = padding_keys(layer_type, params, model_format)
    missing = [k for k in keys.all() if k not in lut]
    if missing:
        raise KeyError(f"padding pairs {missing} not in the lookup table")
    return sum(lut[k].median_ms for k in keys.inputs), lut[keys.output].median_ms, keys.inputs, keys.output


#: Model precision (``bench run --precision``) -> ``bench.tflite_models.to_tflite`` quantization.
TFLITE_QUANTIZATION = {"int8": "int8", "fp32": "float32"}


def default_precision(model_format: str) -> str:
    """The precision models are rendered in when none is asked for: ONNX fp32, TFLite
    full-integer int8 (what MCU-class NPUs run)."""
    return "int8" if model_format == "tflite" else "fp32"


def render_model(ir: ModelIR, model_format: str, seed: int = 0, precision: str | None = None) -> bytes:
    """Serialize an IR model for a runner: ``"onnx"`` (fp32) by :func:`bench.modelgen.to_onnx`,
    ``"tflite"`` (int8 or fp32) by ``bench.tflite_models.to_tflite``."""
    if model_format == "onnx":
        # ONNX benchmark graphs are always fp32; an ONNX runner that takes a precision
        # (TensorRT fp16/int8) applies it when it builds its engine.
        return to_onnx(ir, seed=seed)
    precision = precision or default_precision(model_format)
    if model_format == "tflite":
        if precision not in TFLITE_QUANTIZATION:
            raise RunnerError(f"TFLite benchmark models are int8 or fp32, not {precision!r}")
        try:
            mod = importlib.import_module("bench.tflite_models")
        except ImportError as e:
            raise RunnerError(f"TFLite models need the tflite extra (pip install -e '.[tflite]'): {e}") from e
        try:
            return mod.to_tflite(ir, TFLITE_QUANTIZATION[precision], seed=seed)
        except RunnerError:
            raise
        except Exception as e:  # the emitter's own error types
            raise RunnerError(str(e)) from e
    raise RunnerError(f"no emitter for model format {model_format!r}")


def lum_profile_ms(per_node: Mapping[str, float], ir: ModelIR) -> float:
    """The LUM's share of an ONNX Runtime per-node profile of a padded/single model.

    Matches the LUM's nodes by name: ``lum``, ``lum/...`` (its activation and glue), and
    the names ORT gives them after fusion (``<output tensor>_nchwc`` from the NCHWc
    transformer, where the LUM's output tensor is ``lum_out`` or its activation input).
    Layout reorder nodes ORT inserts between layers are not attributed to the LUM.
    """
    outs = {op.output for op in ir.ops if op.role == "lum"} | {f"{op.name}/pre_act" for op in ir.ops if op.role == "lum"}
    names = set(ir.lum_op_names())
    total, hit = 0.0, False
    for node, ms in per_node.items():
        base = node[: -len("_nchwc")] if node.endswith("_nchwc") else node
        if base in names or base in outs or any(base.startswith(n + "/") for n in names):
            total += ms
            hit = True
    if not hit:
        raise KeyError(f"no LUM node in profile ({', '.join(sorted(per_node))})")
    return total


@dataclass
class RunStats:
    planned: int = 0
    already: int = 0
    measured: int = 0
    failed: int = 0
    skipped_failed: int = 0
    padding_measured: int = 0
    padding_reused: int = 0
    errors: list[str] = field(default_factory=list)


class SmartPad:
    """Runs Algorithm 1 for a plan, against a runner, into a :class:`Store`."""

    def __init__(self, runner: Runner, store: Store, env_id: int, *, warmup: int = 5, runs: int = 20,
                 seed: int = 0, single: bool = True, precision: str | None = None) -> None:
        self.runner, self.store, self.env_id = runner, store, env_id
        self.warmup, self.runs, self.seed, self.single = warmup, runs, seed, single
        self.precision = precision

    def _time(self, ir: ModelIR) -> Timing:
        prepared = self.runner.prepare(render_model(ir, self.runner.model_format, self.seed, self.precision))
        try:
            info = prepared.info if isinstance(prepared.info, dict) else {}
            if info.get("estimate_excludes_cpu_ops"):
                # A cost model (Vela) gives operators it leaves on the CPU no time: T_LUM would
                # silently drop the LUM. Record the configuration as failed, naming the ops.
                cpu = info.get("cpu_ops") or []
                ops = "; ".join(f"{c.get('op', '?')}: {c.get('reason', '')}".strip() for c in cpu) or "?"
                raise RunnerError(f"{ir.kind} model: operator(s) placed on the CPU, which the runner's estimate "
                                  f"excludes (not benchmarkable on this target): {ops}")
            return self.runner.time(prepared, warmup=self.warmup, runs=self.runs)
        finally:
            del prepared

    def measure_padding(self, key: HWC) -> Timing:
        """Measure one padding-only pair (Fig. 5b) and commit it to the LUT."""
        t = self._time(padding_model(*key))
        self.store.add_padding(self.env_id, key, t)
        return t

    def measure_config(self, cfg: Config, lut: Mapping[HWC, Timing]) -> dict[str, Any]:
        """Measure T_a and T_c of one configuration, apply Eq. 4, commit the row."""
        fmt = self.runner.model_format
        t_a = self._time(single_layer_model(cfg.layer_type, cfg.params, fmt)) if self.single else None
        t_c = self._time(padded_model(cfg.layer_type, cfg.params, fmt))
        t_b1, t_b2, in_keys, out_key = t_b_from_lut(lut, cfg.layer_type, cfg.params, fmt)
        iv = lum_interval(t_c.median_ms, t_b1, t_b2)
        row = {
            "config_key": cfg.key, "layer_type": cfg.layer_type, "params": cfg.params, "ops": cfg.ops,
            "single_median_ms": t_a.median_ms if t_a else None, "single_p10_ms": t_a.p10_ms if t_a else None,
            "single_p90_ms": t_a.p90_ms if t_a else None, "single_mad_ms": t_a.mad_ms if t_a else None,
            "single_n": t_a.n if t_a else None,
            "padded_median_ms": t_c.median_ms, "padded_p10_ms": t_c.p10_ms, "padded_p90_ms": t_c.p90_ms,
            "padded_mad_ms": t_c.mad_ms, "padded_n": t_c.n,
            "b1_keys": [list(k) for k in in_keys], "b2_key": list(out_key),
            "t_b1_ms": t_b1, "t_b2_ms": t_b2, "t_lum_lo_ms": iv.lo, "t_lum_hi_ms": iv.hi, "t_lum_ms": iv.mid,
        }
        self.store.add_measurement(self.env_id, row)
        return row

    def run(self, plan: Sequence[Config], *, retry_failed: bool = False,
            progress: Callable[[int], Any] | None = None, on_total: Callable[[int], Any] | None = None,
            describe: Callable[[str], Any] | None = None, stop: Callable[[], bool] | None = None) -> RunStats:
        """Algorithm 1 over ``plan``, skipping what the store already holds.

        ``on_total(n)`` is told the number of measurements left (padding pairs + configs),
        ``progress(1)`` is called after each, ``describe(text)`` names the current phase.
        ``stop()`` is asked before each measurement: True ends the run there (what was
        measured is committed; a time budget, ``bench refine --minutes``).
        """
        st = RunStats(planned=len(plan))
        done = self.store.done_keys(self.env_id)
        if retry_failed:
            self.store.clear_failures(self.env_id)
        failed = self.store.failed_keys(self.env_id)
        todo = []
        for c in plan:
            if c.key in done:
                st.already += 1
            elif c.key in failed:
                st.skipped_failed += 1
            else:
                todo.append(c)
        lut = self.store.padding_lut(self.env_id)
        needed: dict[HWC, None] = {}
        fmt = self.runner.model_format
        for c in todo:
            try:
                keys = padding_keys(c.layer_type, c.params, fmt).all()
            except LayerSpecError:  # refused below, where the configuration is measured
                continue
            for k in keys:
                needed.setdefault(k, None)
        missing = [k for k in needed if k not in lut]
        st.padding_reused = len(needed) - len(missing)
        if on_total:
            on_total(len(missing) + len(todo))
        # each configuration's padding pairs just before it (the first to need one measures it): a
        # run cut short by ``stop`` holds every pair its layers need and no pair for layers it
        # never reached, and a layer and its pairs are timed minutes apart at most
        if describe:
            describe("layers and their padding pairs")
        bad_keys: dict[HWC, str] = {}
        for c in todo:
            if stop is not None and stop():
                break
            try:
                keys = padding_keys(c.layer_type, c.params, fmt).all()
                for k in keys:
                    if k in lut or k in bad_keys:
                        continue
                    if stop is not None and stop():
                        return st
                    try:
                        lut[k] = self.measure_padding(k)
                        st.padding_measured += 1
                    except RunnerError as e:
                        bad_keys[k] = str(e)
                    if progress:
                        progress(1)
                bad = [k for k in keys if k in bad_keys]
                if bad:
                    raise RunnerError(f"padding pair {bad[0]} failed: {bad_keys[bad[0]]}")
                self.measure_config(c, lut)
                st.measured += 1
            except (RunnerError, LayerSpecError) as e:
                st.failed += 1
                msg = f"{c.layer_type} {c.key}: {e}"
                st.errors.append(msg)
                self.store.add_failure(self.env_id, c.key, c.layer_type, c.params, str(e))
                print(f"bench: warning: {msg}", file=sys.stderr)
            if progress:
                progress(1)
        return st


def needed_padding(plan: Iterable[Config], model_format: str = "onnx") -> list[HWC]:
    """Distinct padding pairs a plan needs in models of ``model_format``, in first-use order."""
    out: dict[HWC, None] = {}
    for c in plan:
        for k in padding_keys(c.layer_type, c.params, model_format).all():
            out.setdefault(k, None)
    return list(out)
