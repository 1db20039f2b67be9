"""The search spaces of :mod:`nas.spaces` as a network source of ``bench`` (``bench
calibrate --space``, ``bench refine --space``, ``nas search --calibrate``).

:data:`provider` implements :class:`bench.network_sources.SpaceProvider`: a space name
(built-in or ``MODULE:FUNCTION``, :func:`nas.spaces.resolve_space`) is sampled with
Optuna's ``RandomSampler`` (``seed``), repeated architectures drawn again, and each sample is
built with fixed weights (``torch.manual_seed(0)``) and exported the way ``nas search``
exports its candidates (:func:`nas.export.to_onnx`).

pyproject.toml names :data:`provider` in the entry-point group
``confident_latency.network_sources``, where bench finds it; :func:`register` adds it
in-process (nas's own commands, a source checkout's tests), for when the package metadata
is not installed.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from bench.network_sources import NetworkSpec, SourceError, register_space_provider, space_network
from estimator.errors import UserError

__all__ = ["SearchSpaces", "provider", "register"]


class SearchSpaces:
    """The :mod:`nas.spaces` search spaces (a :class:`bench.network_sources.SpaceProvider`)."""

    def resolve(self, space: str) -> tuple[str, Any]:
        from .spaces import resolve_space  # noqa: PLC0415 (torch only where spaces are sampled)

        return resolve_space(space)

    def sample(self, space: str, label: str, handle: Any, n: int, *, seed: int,
               options: Mapping[str, Any]) -> list[NetworkSpec]:
        import optuna  # noqa: PLC0415

        from .spaces import sample  # noqa: PLC0415

        opts = dict(options)
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
        out: list[NetworkSpec] = []
        seen: set[str] = set()
        i = tries = 0
        while i < n:
            tries += 1
            if tries > 20 * n + 20:
                raise UserError(f"only {i} distinct architectures in {tries} draws")
            trial = study.ask()
            arch = sample(handle, trial, opts, name=label)
            key = repr(sorted(trial.params.items()))
            if key in seen:
                continue
            seen.add(key)
            params = dict(trial.params)
            detail = {"space": space, "options": opts, "seed": seed, "index": i, "params": params,
                      "architecture": arch.description, "input_shape": list(arch.input_shape)}
            out.append(space_network(label, i, seed=seed, detail=detail, build=_builder(handle, params, opts, label)))
            i += 1
        return out

    def rebuild(self, label: str, handle: Any, detail: Mapping[str, Any]) -> Callable[[], bytes]:
        return _builder(handle, detail.get("params") or {}, detail.get("options") or {}, label)


def _builder(fn: Any, params: Mapping[str, Any], opts: Mapping[str, Any], label: str) -> Callable[[], bytes]:
    def build() -> bytes:
        import torch  # noqa: PLC0415

        from .export import to_onnx  # noqa: PLC0415
        from .spaces import rebuild  # noqa: PLC0415

        torch.manual_seed(0)
        arch = rebuild(fn, params, opts, name=label)
        try:
            return to_onnx(arch.module, arch.input_shape).SerializeToString()
        except UserError as e:
            raise SourceError(f"space {label} sample {dict(params)}: {e}") from None
    return build


#: the provider the entry point names
provider = SearchSpaces()


def register() -> None:
    """Make :data:`provider` a space provider of this process (once)."""
    register_space_provider(provider)
