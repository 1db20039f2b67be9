"""``estimator`` command line (placeholder until the subcommands land)."""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("estimator: no subcommands yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
