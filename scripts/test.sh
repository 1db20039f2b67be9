#!/usr/bin/env bash
# Install the package with its test extras and run the whole test suite.
# Installs into the active virtual environment; with none active, into .venv (made here from
# python3, without the base interpreter's packages). Fails (non-zero) on any test failure and
# when no test is collected (pytest exit 5).
set -euo pipefail
cd "$(dirname "$0")/.."
# Distributed NAS tests run a throwaway PostgreSQL server on loopback: install it when missing.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    else
        echo "note: PostgreSQL is not installed; the distributed NAS tests will be skipped" >&2
    fi
fi
if [ -z "${VIRTUAL_ENV:-}" ]; then
    [ -x .venv/bin/python ] || python3 -m venv .venv
    # shellcheck disable=SC1091
    . .venv/bin/activate
fi
python -m pip install --quiet -e '.[test]'  # (builds the native importer where a C compiler exists)
# With a compiler, the native-vs-Python differential tests must run, not skip.
if command -v "${CC:-cc}" >/dev/null 2>&1; then export CL_REQUIRE_NATIVE=1; fi
set +e
python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "ERROR: pytest collected no tests" >&2
    exit 1
fi
exit "$rc"
