"""``nas``: hardware-aware architecture search with latency intervals from the estimation service."""
from __future__ import annotations

from typing import Sequence

from estimator.cliutil import run

#: Subcommand modules; each exposes ``register(subparsers)``.
COMMANDS = ["nas.cmd_search", "nas.cmd_show"]


def main(argv: Sequence[str] | None = None) -> int:
    return run("nas", __doc__.strip().split("\n")[0].split(": ", 1)[1], COMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
