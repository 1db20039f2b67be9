"""Whole-network measuring: the one place that times whole networks on a target.

``bench calibrate`` (network rows of a profile) and ``bench networks`` (a network set to
evaluate a profile against, ``estimator evaluate --networks DIR``) both run
:func:`measure_networks`:

1. every network is built, imported as the estimator reads it (:func:`bench.network_sources.weightless`),
   recorded in the benchmark database (``networks`` table), converted to the runner's format
   (ONNX as it is, TFLite through :mod:`bench.tflite_convert`: int8 for Vela and int8 LiteRT,
   float32 for ``--precision fp32``) and prepared on the runner once, before anything is
   timed, so a network the runner cannot take fails before the rounds start. Prepared
   networks stay prepared while their models add up to :data:`KEEP_PREPARED_BYTES`; the
   others wait on disk in the runner's format and are prepared again for each timing and
   released after it. An interpreter holds its weights two or three times over: 66 networks
   with the zoo's VGG-16 and ResNet-50, all prepared at once in LiteRT fp32, were killed at
   16 GB; this way the same run peaks at 7.8 GB;
2. the networks are timed in ``rounds`` interleaved rounds (every network once per round,
   ``warmup`` untimed and ``runs`` timed inferences, in an order shuffled per round:
   :func:`round_order`), so a slow spell of a shared machine hits all networks alike and
   lines up with no network's place in the list; each round of each network is committed as it is taken
   (``network_rounds``), and a run started again resumes where it stopped;
3. a network's latency is the median of its rounds' medians; ``spread_pct`` (max / min - 1
   of the round medians) says how much the target moved meanwhile. When the median network's
   spread exceeds :data:`SPREAD_WARN_PCT`, :func:`moved_warning` says so and the commands print
   it: something else loaded the target, and a calibration would learn that noise. Measured
   (2-vCPU AMD VM, 60 networks in 3 rounds): ONNX Runtime at 1 thread 2.5-6 %,
   at 2 threads 14.5 %, at 2 threads while another job ran 44 %.

A cost model (Vela) is asked once per network (``rounds = runs = 1``): its whole-network
estimate is recorded as ``kind = estimated``, never as a measurement.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from estimator.errors import UserError

from .network_sources import NetworkSpec, weightless
from .runners.base import Prepared, Runner, RunnerError
from .storage import Store

__all__ = ["NetworkResult", "measure_networks", "round_order", "runner_model", "write_network_set", "network_rows", "moved_warning",
           "DEFAULT_ROUNDS", "DEFAULT_RUNS", "DEFAULT_WARMUP"]

#: measurement protocol id of whole networks (part of the environment's settings)
PROTOCOL = "network-v1"
#: the timing defaults of every whole-network measurement (bench calibrate, networks, check;
#: nas search --calibrate): interleaved rounds over the networks, and per network and round
#: the untimed and timed inferences (a cost model is asked once)
DEFAULT_ROUNDS = 3
DEFAULT_RUNS = 20
DEFAULT_WARMUP = 5
#: the median network's round-to-round spread (%) beyond which the measurement warns
SPREAD_WARN_PCT = 20.0
#: converted models (TFLite) up to this size are kept beside the database (:func:`converted`)
CACHE_CONVERTED_BYTES = 64 * 2**20
#: networks stay prepared between rounds while their runner-format models add up to this
#: (the rest are prepared for each timing; see the module docstring)
KEEP_PREPARED_BYTES = 512 * 2**20


@dataclass
class NetworkResult:
    spec: NetworkSpec
    measured_ms: float
    spread_pct: float
    p10_ms: float
    p90_ms: float
    rounds: int
    runs: int
    measured_at: str
    round_medians_ms: list[float]


def runner_model(runner: Runner, model: bytes, precision: str) -> bytes:
    """``model`` (ONNX with weights) in the format ``runner`` takes."""
    if runner.model_format == "onnx":
        return model
    if runner.model_format == "tflite":
        from .tflite_models import MissingTFLiteExtraError  # noqa: PLC0415

        try:
            from .tflite_convert import convert_onnx  # noqa: PLC0415
        except MissingTFLiteExtraError as e:
            raise UserError(f"runner {runner.name!r} needs TFLite models: {e}") from None
        return convert_onnx(model, "int8" if precision == "int8" else "float32")
    raise UserError(f"runner {runner.name!r} takes {runner.model_format!r} models; whole networks can be given as "
                    f"ONNX or TFLite only")


class _Models:
    """Networks in the runner's format: prepared and kept while they fit
    :data:`KEEP_PREPARED_BYTES`, else on disk and prepared at each :meth:`get`."""

    def __init__(self, runner: Runner, spill: Path) -> None:
        self.runner, self.spill = runner, spill
        self.kept: dict[str, Prepared] = {}
        self.files: dict[str, Path] = {}
        self.kept_bytes = 0

    def _prepare(self, name: str, model: bytes) -> Prepared:
        try:
            return self.runner.prepare(model)
        except (RunnerError, UserError) as e:
            raise UserError(f"{name}: {self.runner.name} cannot run it: {e}") from None

    def add(self, name: str, model: bytes) -> None:
        prepared = self._prepare(name, model)  # every network once, before any timing
        if self.kept_bytes + len(model) <= KEEP_PREPARED_BYTES:
            self.kept[name] = prepared
            self.kept_bytes += len(model)
            return
        del prepared
        path = self.spill / f"{len(self.files)}.model"
        path.write_bytes(model)
        self.files[name] = path

    def get(self, name: str) -> Prepared:
        if name in self.kept:
            return self.kept[name]
        return self._prepare(name, self.files[name].read_bytes())

    def clear(self) -> None:
        self.kept.clear()


def _bar(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm  # noqa: PLC0415

    return tqdm(total=total, desc=desc, unit="net", disable=not enabled or total == 0, file=sys.stderr,
                dynamic_ncols=True, leave=False)


def round_order(specs: Sequence[NetworkSpec], r: int) -> list[NetworkSpec]:
    """Round ``r``'s order of ``specs``: a shuffle seeded by the round, so a resumed run
    takes the same order."""
    import random  # noqa: PLC0415

    order = list(specs)
    random.Random(f"round-{r}").shuffle(order)
    return order


def converted(runner: Runner, model: bytes, precision: str, cache: Path | None) -> bytes:
    """:func:`runner_model`, kept in ``cache`` (a directory) when it is a conversion of at most
    :data:`CACHE_CONVERTED_BYTES`: a resumed or second measurement of the same networks
    converts none of them again (ONNX -> TFLite: 1-5 s a network)."""
    if cache is None or runner.model_format == "onnx":
        return runner_model(runner, model, precision)
    import hashlib  # noqa: PLC0415

    path = cache / f"{hashlib.sha256(model).hexdigest()[:24]}-{precision}.{runner.model_format}"
    if path.is_file():
        return path.read_bytes()
    out = runner_model(runner, model, precision)
    if len(out) <= CACHE_CONVERTED_BYTES:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.partial")
        tmp.write_bytes(out)
        tmp.replace(path)
    return out


def measure_networks(runner: Runner, store: Store, env_id: int, specs: Sequence[NetworkSpec], *, fusion: Any,
                     warmup: int = DEFAULT_WARMUP, runs: int = DEFAULT_RUNS, rounds: int = DEFAULT_ROUNDS,
                     precision: str = "fp32", cache: Path | None = None, first_round: int = 0,
                     progress: bool = False, log: Callable[[str], None] | None = None,
                     tick: Callable[[], None] | None = None) -> list[NetworkResult]:
    """Build, record, prepare, then time ``specs`` in interleaved rounds (see the module
    docstring); returns one result per spec, in order. ``cache``: where converted models are
    kept (:func:`converted`). ``first_round``: the rounds before it were measured by an
    earlier step of the caller's plan (``bench adapt`` times the networks before and after its
    layers), so only rounds from it on that the database holds already count as resumed.
    ``tick()`` is called after each network built and each round stored (``bench adapt``
    keeps its time budget current with it, so a killed run's time counts on resume)."""
    tick = tick or (lambda: None)
    if runner.provenance == "estimated":
        warmup, runs, rounds = 0, 1, 1
    if rounds < 1 or runs < 1 or warmup < 0:
        raise UserError("--rounds and --runs must be >= 1, --warmup >= 0")
    done = store.network_rounds(env_id)
    with tempfile.TemporaryDirectory(prefix="bench-networks-") as spill:
        models = _Models(runner, Path(spill))
        bar = _bar(len(specs), "building", progress)
        try:
            for spec in specs:
                bar.set_postfix_str(spec.name, refresh=False)
                model = spec.build()
                weightless(spec, model, fusion)
                store.add_network(env_id, spec.name, spec.family, spec.source, spec.detail, spec.weightless_onnx,
                                  spec.onnx_sha256)
                if any(r not in done.get(spec.name, {}) for r in range(rounds)):
                    models.add(spec.name, converted(runner, model, precision, cache))
                bar.update()
                tick()
        finally:
            bar.close()
        todo = sum(1 for s in specs for r in range(rounds) if r not in done.get(s.name, {}))
        resumed = sum(1 for s in specs for r in range(first_round, rounds) if r in done.get(s.name, {}))
        if log is not None and resumed:
            planned = len(specs) * (rounds - first_round)
            log(f"resuming: {resumed} of {planned} network rounds already measured")
        bar = _bar(todo, "measuring", progress)
        try:
            for r in range(rounds):
                for spec in round_order(specs, r):
                    if r in done.get(spec.name, {}):
                        continue
                    bar.set_postfix_str(f"round {r + 1}/{rounds} {spec.name}", refresh=False)
                    prepared = models.get(spec.name)
                    try:
                        t = runner.time(prepared, warmup=warmup, runs=runs)
                    except RunnerError as e:
                        raise UserError(f"{spec.name}: {runner.name} failed timing it: {e}") from None
                    del prepared  # an unkept network is released here
                    store.add_network_round(env_id, spec.name, r, t)
                    bar.update()
                    tick()
        finally:
            bar.close()
            models.clear()
    rounds_now = store.network_rounds(env_id)
    out = []
    for spec in specs:
        got = rounds_now[spec.name]
        meds = [got[r][0].median_ms for r in range(rounds)]
        out.append(NetworkResult(spec=spec, measured_ms=statistics.median(meds),
                                 spread_pct=100.0 * (max(meds) / min(meds) - 1.0) if min(meds) > 0 else 0.0,
                                 p10_ms=statistics.median(got[r][0].p10_ms for r in range(rounds)),
                                 p90_ms=statistics.median(got[r][0].p90_ms for r in range(rounds)),
                                 rounds=rounds, runs=runs, measured_at=max(got[r][1] for r in range(rounds)),
                                 round_medians_ms=meds))
    return out


def moved_warning(results: Sequence[NetworkResult]) -> str:
    """A warning when the target moved while the networks were measured (the median network's
    round-to-round spread beyond :data:`SPREAD_WARN_PCT`), or ``""``."""
    spreads = [r.spread_pct for r in results if r.rounds >= 2]
    if not spreads or statistics.median(spreads) <= SPREAD_WARN_PCT:
        return ""
    return (f"the target moved while the networks were measured: the median network's rounds differ by "
            f"{statistics.median(spreads):.0f} % (the largest {max(spreads):.0f} %); something else ran there, or it "
            f"changed speed, and calibrating on these rows learns that noise; measure again with nothing else "
            f"running (another --db, or more --rounds)")


def network_rows(results: Sequence[NetworkResult], *, runner: str, kind: str) -> list[dict[str, Any]]:
    """Rows of ``networks.csv`` (:data:`estimator.dataset.NETWORK_COLUMNS`)."""
    from estimator.profile import NETWORKS_DIR  # noqa: PLC0415

    return [{"name": r.spec.name, "family": r.spec.family, "source": r.spec.source, "detail": r.spec.detail,
             "onnx": f"{NETWORKS_DIR}/{r.spec.onnx_sha256[:16]}.onnx", "onnx_sha256": r.spec.onnx_sha256,
             "measured_ms": r.measured_ms, "spread_pct": r.spread_pct, "p10_ms": r.p10_ms, "p90_ms": r.p90_ms,
             "rounds": r.rounds, "runs": r.runs, "kind": kind, "runner": runner, "measured_at": r.measured_at}
            for r in results]


def write_network_set(directory: str | Path, results: Sequence[NetworkResult], *, runner: str, kind: str) -> Path:
    """Write ``directory/networks.csv`` and ``directory/networks/*.onnx`` (weightless)."""
    from estimator.dataset import write_network_rows  # noqa: PLC0415
    from estimator.profile import NETWORKS_DIR, NETWORKS_FILE  # noqa: PLC0415

    d = Path(directory)
    (d / NETWORKS_DIR).mkdir(parents=True, exist_ok=True)
    for r in results:
        (d / NETWORKS_DIR / f"{r.spec.onnx_sha256[:16]}.onnx").write_bytes(r.spec.weightless_onnx)
    write_network_rows(d / NETWORKS_FILE, network_rows(results, runner=runner, kind=kind))
    return d / NETWORKS_FILE
