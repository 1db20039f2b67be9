#!/usr/bin/env bash
# Install the package with its test extras and run the whole test suite.
# Fails (non-zero) on any test failure and when no test is collected (pytest exit 5).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet -e '.[test]'
set +e
python3 -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "ERROR: pytest collected no tests" >&2
    exit 1
fi
exit "$rc"
