"""``estimator``: inspect networks, train device models, predict latency with confidence."""
from __future__ import annotations

from typing import Sequence

from .cliutil import run

#: Subcommand modules; each exposes ``register(subparsers)``.
COMMANDS = ["estimator.cmd_layers", "estimator.cmd_model", "estimator.cmd_lut"]


def main(argv: Sequence[str] | None = None) -> int:
    return run("estimator", __doc__.strip().split("\n")[0].split(": ", 1)[1], COMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
