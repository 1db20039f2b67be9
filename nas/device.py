"""The search's device measured on this machine: the one rule of whether ``nas search
--calibrate`` and ``--refine`` can time the device here."""
from __future__ import annotations

from typing import Any

from estimator.errors import UserError

__all__ = ["device_runner"]


def device_runner(base: Any, options: dict[str, Any], flag: str) -> tuple[dict[str, Any], Any]:
    """The device's runner built on this machine, and its options (``options`` over the base
    profile's defaults, :func:`bench.calibrate.runner_defaults`): the one rule of whether
    ``--calibrate`` and ``--refine`` can measure the device here (a runner whose package is
    missing, or whose options are wrong, is one line naming ``flag``)."""
    from bench.calibrate import runner_defaults  # noqa: PLC0415
    from bench.measure import make_runner  # noqa: PLC0415

    given = {**runner_defaults(base.runner, base), **options}
    try:
        return given, make_runner(base.runner, given)
    except UserError as e:
        raise UserError(f"{flag} measures {base.name} here with its runner, which cannot run on this machine: "
                        f"{e}") from None
