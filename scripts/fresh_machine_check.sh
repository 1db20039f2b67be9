#!/usr/bin/env bash
# Run the README's two opening commands exactly as written, as a new user on a fresh machine would:
# in a clean clone of HEAD (commit first: uncommitted work is not checked), inside a venv made by the
# base interpreter, with the setuptools that venv brings (older than 70) and no `wheel`.
#
#   bash scripts/fresh_machine_check.sh [--only 1|2] [--keep] [--python PYTHON]
#
# Prints one PASS/FAIL line per command with its wall time, the tail of a failing command's log,
# and exits non-zero when either fails. Logs are kept under the work folder with --keep.
set -uo pipefail
only="" keep=0 base=python3
while [ $# -gt 0 ]; do
    case "$1" in
        --only) only="$2"; shift 2 ;;
        --keep) keep=1; shift ;;
        --python) base="$2"; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) echo "fresh_machine_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$only" in ""|1|2) ;; *) echo "fresh_machine_check: --only takes 1 or 2, not $only" >&2; exit 2 ;; esac
top=$(git -C "$(dirname "$0")" rev-parse --show-toplevel) || exit 2
work=$(mktemp -d "${TMPDIR:-/tmp}/fresh-machine.XXXXXX")
[ "$keep" = 1 ] || trap 'rm -rf "$work"' EXIT
echo "work folder: $work"
git clone -q "$top" "$work/repo" || exit 2
echo "checking $(git -C "$work/repo" log -1 --format='%h %s' | cut -c1-100)"

"$base" -m venv "$work/venv" || { echo "FAIL: $base -m venv"; exit 1; }
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
# What a brand-new machine's interpreter has: an old setuptools and no wheel. A base interpreter
# that was upgraded by hand still gets that here, so that it cannot hide a missing build step.
if python -c 'import sys, setuptools; sys.exit(int(setuptools.__version__.split(".")[0]) < 70)' 2>/dev/null; then
    python -m pip install --quiet 'setuptools<70' || exit 2
fi
python -m pip uninstall --quiet -y wheel >/dev/null 2>&1
echo "venv: $(python --version), pip $(python -m pip --version | cut -d' ' -f2)," \
     "setuptools $(python -c 'import setuptools; print(setuptools.__version__)' 2>/dev/null || echo none)," \
     "wheel $(python -c 'import wheel; print(wheel.__version__)' 2>/dev/null || echo none)"

mapfile -t cmds < <(python - "$work/repo/README.md" <<'PY'
import re, sys
head = open(sys.argv[1]).read().split("\n## ", 1)[0]
for block in re.findall(r"```(?:bash|sh)?\n(.*?)```", head, flags=re.S)[:2]:
    print(block.strip())
PY
)
[ "${#cmds[@]}" -eq 2 ] || { echo "FAIL: the README does not open with two commands"; exit 1; }

status=0
cd "$work/repo" || exit 2
for i in 1 2; do
    [ -z "$only" ] || [ "$only" = "$i" ] || continue
    cmd=${cmds[$((i - 1))]}
    echo "command $i: $cmd"
    start=$(date +%s)
    bash -c "$cmd" >"$work/command$i.log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    if [ "$rc" -eq 0 ]; then
        echo "PASS command $i in ${secs} s: $(grep -E '(passed|failed|best|feasible)' "$work/command$i.log" | tail -n 1 | cut -c1-160)"
    else
        status=1
        echo "FAIL command $i (exit $rc) after ${secs} s; the end of its log:"
        tail -n 40 "$work/command$i.log" | sed 's/^/    /'
    fi
done
exit "$status"
