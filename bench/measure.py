"""Measuring layers on a runner, shared by ``bench run``, ``bench refine`` and ``bench calibrate``:
the runner built from its options, the one layer-measuring path (:func:`measure_plan`: every
row committed as it is taken, resumable, one process per database) and the settings that
make a measurement's environment."""
from __future__ import annotations

import contextlib
import importlib
import inspect
import re
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator, Sequence

from estimator.errors import UserError

from .runners.base import RUNNERS, RunnerError, get_runner

__all__ = ["PROTOCOL", "make_runner", "runner_options", "bench_version", "layer_settings", "exclusive",
           "measure_plan", "run_with_progress"]

#: The smart-padding measurement protocol (part of a layer row's settings).
PROTOCOL = "smartpad-v1"


def make_runner(runner: str, given: dict[str, Any]) -> Any:
    """The runner named ``runner`` with the ``given`` options it takes (others are an error
    naming the flag, :func:`runner_options`); notes of ignored options go to stderr,
    failures are one line."""
    opts = runner_options(runner, given)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = get_runner(runner, **opts)
        for w in caught:
            print(f"bench: note: {w.message}", file=sys.stderr)
    except TypeError as e:  # a required option not given: name its flag
        missing = re.findall(r"'(\w+)'", str(e)) if "required" in str(e) else []
        if missing:
            flags = ", ".join(f"--{m.replace('_', '-')}" for m in missing)
            raise UserError(f"runner {runner!r} needs {flags}") from e
        raise UserError(f"runner {runner!r}: {e}") from e
    except (RunnerError, ValueError) as e:
        raise UserError(f"runner {runner!r}: {e}") from e
    return r


def runner_options(runner: str, given: dict[str, Any]) -> dict[str, Any]:
    """The given options the runner's constructor takes.

    ``precision`` selects the models' precision (how they are rendered) and is forwarded
    only to runners that take it; any other option a runner does not take is an error
    naming the flag, rather than a silent no-op.
    """
    target = RUNNERS.get(runner)
    if target is None:
        return given
    mod_name, cls_name = target.split(":")
    try:
        cls = getattr(importlib.import_module(mod_name), cls_name)
        params = inspect.signature(cls.__init__).parameters
    except (ImportError, AttributeError, ValueError, TypeError):
        return given  # get_runner reports an unavailable runner precisely
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return given
    out = {}
    for k, v in given.items():
        if k in params:
            out[k] = v
        elif k != "precision":
            raise UserError(f"runner {runner!r} has no option --{k.replace('_', '-')}")
    return out


def bench_version() -> str:
    """The installed distribution's version (part of a measurement's settings)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("confident-latency")
    except PackageNotFoundError:
        return "unknown"


def layer_settings(runner: Any, *, warmup: int, runs: int, precision: str | None = None) -> dict[str, Any]:
    """The measurement settings of smart-padding rows (part of their environment's identity)."""
    from .smartpad import default_precision

    return {"protocol": PROTOCOL, "warmup": warmup, "runs": runs, "weights_seed": 0,
            "model_format": runner.model_format, "precision": precision or default_precision(runner.model_format),
            "bench_version": bench_version()}


def measure_plan(runner: Any, path: Path, device: str, plan: Sequence[Any], *, warmup: int, runs: int,
                 precision: str | None = None, retry_failed: bool = False, progress: bool = True,
                 announce: Any = None, stop: Any = None, locked: bool = False) -> tuple[Any, int, int]:
    """Measure ``plan`` with smart padding on ``runner`` into the database ``path`` (one
    bench process per database, every row committed as it is taken, what is there skipped),
    with a progress bar: the one layer-measuring path of ``bench run`` and ``bench refine``.
    ``announce(env_id)`` is called before measuring; ``stop()`` True ends the run early
    (:meth:`~bench.smartpad.SmartPad.run`); ``locked``: the caller holds the database
    (:func:`exclusive`) already. Returns (:class:`~bench.smartpad.RunStats`, env_id, rows of
    the environment). The runner stays open (the caller closes it)."""
    from .smartpad import SmartPad
    from .storage import Store

    try:
        env = runner.environment()
        settings = layer_settings(runner, warmup=warmup, runs=runs, precision=precision)
        with Store(path) as store, contextlib.nullcontext() if locked else exclusive(path):
            env_id = store.environment_id(device, env, settings)
            bench = SmartPad(runner, store, env_id, warmup=warmup, runs=runs, precision=settings["precision"])
            if announce is not None:
                announce(env_id)
            stats = run_with_progress(bench, plan, retry_failed=retry_failed, no_progress=not progress, stop=stop)
            return stats, env_id, store.count(env_id)
    except RunnerError as e:
        raise UserError(f"runner {runner.name!r}: {e}") from e


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """One ``bench run`` per database at a time: two would time each other's load and
    measure the same configurations twice. The lock (``flock`` on ``<db>.lock``) dies
    with its process, so a killed run never blocks the resume."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    real = Path(path).resolve()  # one lock per file, whatever path (a symlink) names it
    try:
        lock = real.with_name(real.name + ".lock").open("a")
    except OSError as e:
        raise UserError(f"{path}: cannot create its lock file beside it ({e.strerror or e})") from None
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise UserError(f"{path} is in use by another bench run") from None
        yield
    finally:
        lock.close()


def run_with_progress(bench: Any, plan: Sequence[Any], *, retry_failed: bool, no_progress: bool,
                       stop: Any = None) -> Any:
    from tqdm import tqdm

    bars: list[Any] = []

    def total(n: int) -> None:
        bars.append(tqdm(total=n, unit="meas", disable=no_progress or n == 0, file=sys.stderr,
                         dynamic_ncols=True, mininterval=0.5, smoothing=0.05))

    def progress(n: int) -> None:
        bars[-1].update(n)

    def describe(text: str) -> None:
        if bars:
            bars[-1].set_description(text)

    try:
        return bench.run(plan, retry_failed=retry_failed, progress=progress, on_total=total, describe=describe,
                         stop=stop)
    finally:
        for b in bars:
            b.close()
