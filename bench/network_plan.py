"""A measurement plan from ONNX networks: exactly the layer configurations they use.

``bench run --from-onnx PATH`` imports each network with the estimator's own front end
(:func:`estimator.onnx_import.load_network`, with the fusion rules of the device's
profile when one is installed, the library default otherwise). It then plans one
configuration per distinct benchable layer, as the estimator will look it up: the
layer's raw parameters, with ``act`` written out where the layer has no fused activation
(:func:`estimator.layers.layer_bench_params`).

The sampling plans draw from a design space. This plan measures what a known set of
networks will ask for, such as a model family that is about to be deployed, or the
networks a NAS space produces. ``--exclude-onnx`` leaves out every configuration that
other networks use, so that held-out validation networks stay unseen at the layer level
too. Nothing is dropped silently: layers of types without a
benchmark (``other``, ``transpose``, ...), configurations the smart-padding model cannot
build, and configurations over the runner's limits are counted in the report, by type.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from estimator.errors import UserError
from estimator.layers import layer_bench_params

from .modelgen import BENCHABLE_TYPES
from .sampling import Config, Limits, config_key, limit_reason


@dataclass
class NetworkPlanReport:
    networks: int = 0
    layers: int = 0
    #: layer type -> layers of it that have no benchmark
    unbenchable: Counter = field(default_factory=Counter)
    #: layer type -> distinct configurations over the runner's limits (ops, params, elements)
    over_limits: Counter = field(default_factory=Counter)
    #: layer type -> distinct configurations left out because an excluded network uses them
    excluded: Counter = field(default_factory=Counter)
    #: layer type -> distinct configurations the padded model cannot describe
    invalid: Counter = field(default_factory=Counter)

    def lines(self) -> list[str]:
        out = []
        for what, c in (("no benchmark for the type", self.unbenchable),
                         ("distinct configurations over the runner's limits", self.over_limits),
                         ("distinct configurations an excluded network uses", self.excluded),
                         ("distinct configurations smart padding cannot build", self.invalid)):
            if c:
                out.append(f"  not planned, {what}: " + ", ".join(f"{t} {n}" for t, n in sorted(c.items())))
        return out


def onnx_files(paths: Sequence[str | Path], flag: str = "--from-onnx") -> list[Path]:
    """The ``.onnx`` files named by ``paths`` (a directory stands for its ``*.onnx``, sorted)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.onnx"))
            if not found:
                raise UserError(f"{flag} {p}: the directory holds no .onnx file")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise UserError(f"{flag} {p}: no such file or directory")
    return list(dict.fromkeys(out))


def _layer_configs(path: Path, fusion: Any) -> list[tuple[str, str, dict[str, Any] | None]]:
    """``(type, key, benchmark params)`` of every layer of a network (params None: no benchmark)."""
    from estimator.onnx_import import load_network

    out = []
    for layer in load_network(path, fusion=fusion).layers:
        if layer.type not in BENCHABLE_TYPES:
            out.append((layer.type, "", None))
        else:
            params = layer_bench_params(layer.type, layer.params)
            out.append((layer.type, config_key(layer.type, params), params))
    return out


def network_layer_configs(path: str | Path, *, fusion: Any = None) -> list[tuple[str, str, dict[str, Any] | None]]:
    """``(type, config key, benchmark params)`` of every layer of one ONNX network, as the
    estimator imports it with ``fusion`` (params None: a type without a benchmark)."""
    return _layer_configs(Path(path), fusion)


def held_out_keys(exclude: Sequence[str | Path], *, fusion: Any = None) -> set[str]:
    """The configuration keys that the networks in ``exclude`` (files or directories) use:
    what ``--exclude-onnx`` keeps out of a plan."""
    return {key for f in (onnx_files(exclude, "--exclude-onnx") if exclude else [])
            for _, key, params in _layer_configs(f, fusion) if params is not None}


def network_plan(paths: Sequence[str | Path], *, fusion: Any = None, limits: Limits = Limits(),
                 exclude: Sequence[str | Path] = ()) -> tuple[list[Config], NetworkPlanReport]:
    """One :class:`~bench.sampling.Config` per distinct benchable layer of the networks, in the
    order the networks (then their layers) come; ``fusion``: the rules the estimator imports
    with on the device (:class:`~estimator.fusion.FusionRules`, or None for the default).
    Configurations that a network in ``exclude`` uses are left out (held-out validation
    networks stay unseen at the layer level too)."""
    report = NetworkPlanReport()
    held_out = held_out_keys(exclude, fusion=fusion)
    plan: dict[str, Config] = {}
    refused: set[str] = set()
    for f in onnx_files(paths):
        report.networks += 1
        for layer_type, key, params in _layer_configs(f, fusion):
            report.layers += 1
            if params is None:
                report.unbenchable[layer_type] += 1
                continue
            if key in plan or key in refused:
                continue
            if key in held_out:
                refused.add(key)
                report.excluded[layer_type] += 1
                continue
            why = limit_reason(layer_type, params, limits)
            if why is None:
                plan[key] = Config.make(layer_type, params)
            else:
                refused.add(key)
                (report.invalid if why == "invalid" else report.over_limits)[layer_type] += 1
    return list(plan.values()), report
