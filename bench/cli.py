"""``bench``: smart-padding latency benchmarks of layer configurations on a device."""
from __future__ import annotations

from typing import Sequence

from estimator.cliutil import run

#: Subcommand modules; each exposes ``register(subparsers)``. Adding a command is adding
#: its module name here.
COMMANDS = ["bench.cmd_run", "bench.cmd_calibrate", "bench.cmd_adapt", "bench.cmd_check", "bench.cmd_refine", "bench.cmd_agent",
            "bench.cmd_profile", "bench.cmd_fusion"]


def main(argv: Sequence[str] | None = None) -> int:
    return run("bench", __doc__.strip().split("\n")[0].split(": ", 1)[1], COMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
