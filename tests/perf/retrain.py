"""Retraining after a `bench refine` round: cold vs incremental (a script, not a test: prints figures).

On a copy of a profile (default ``host-cpu``, 23.7k rows) in a temporary directory, with a
temporary model cache (``CL_CACHE_DIR``):

1. *base*: the profile less the last ``--rows`` rows of each of ``--types`` (real measured
   rows, held back), trained cold;
2. *round*: the held-back rows appended at the end of ``measurements.csv``, as ``bench
   refine`` appends a round's rows, retrained with the base's cache entries (only the
   types that got rows are trained; their grid search is reused unless they grew past a
   checkpoint, see ``estimator.models.grid_rows``);
3. the round's profile trained cold (an empty cache), which is what every round cost
   before per-type cache entries; it must give the same models as 2.

Then the model-set cache hit, and ``Estimator.from_profile`` with a warm cache (what
``bench refine`` calls after training: calibration on top). Times are wall-clock seconds
in one process, so the ratio compares like with like.

    taskset -c 0 python tests/perf/retrain.py [--profile host-cpu] [--types conv2d,dwconv2d] [--rows 30]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def split_rows(lines: list[bytes], types: list[str], n: int) -> tuple[list[bytes], list[bytes]]:
    """``(kept, held back)``: the last ``n`` data lines of each type in ``types`` held back
    (the header stays in ``kept``); both in file order."""
    back: set[int] = set()
    for t in types:
        idx = [i for i, line in enumerate(lines[1:], 1) if line.split(b",", 1)[0] == t.encode()]
        if len(idx) < n:
            raise SystemExit(f"type {t!r} has {len(idx)} rows, fewer than --rows {n}")
        back.update(idx[-n:])
    return [l for i, l in enumerate(lines) if i not in back], [l for i, l in enumerate(lines) if i in back]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="host-cpu")
    ap.add_argument("--types", default="conv2d,dwconv2d", help="types that get rows in the round (comma-separated)")
    ap.add_argument("--rows", type=int, default=30, help="rows per type held back and appended (default 30)")
    a = ap.parse_args(argv)

    from estimator.models import get_models  # noqa: PLC0415
    from estimator.predict import Estimator  # noqa: PLC0415
    from estimator.profile import MEASUREMENTS_FILE, load_profile  # noqa: PLC0415

    src = load_profile(a.profile)
    types = [t for t in a.types.split(",") if t]
    with tempfile.TemporaryDirectory(prefix="retrain-") as tmp:
        root = Path(tmp) / "profiles"
        prof_dir = root / src.name
        shutil.copytree(src.path, prof_dir)
        csv = prof_dir / MEASUREMENTS_FILE
        # the measurements' own line ends (CRLF from the csv module): split and join on them
        data = csv.read_bytes()
        nl = b"\r\n" if b"\r\n" in data[:4096] else b"\n"
        lines = data.rstrip(nl).split(nl)
        kept, back = split_rows(lines, types, a.rows)

        def timed(label: str, cache: Path, **kw) -> tuple[float, object]:
            os.environ["CL_CACHE_DIR"] = str(cache)
            prof = load_profile(src.name, root)
            t0 = time.perf_counter()
            m = get_models(prof, **kw)
            dt = time.perf_counter() - t0
            rep = m.report
            print(f"{label:<44} {dt:8.2f} s  (rows {sum(rep['rows_used'].values())}; "
                  f"types from cache: {len(rep.get('cached_types', []))}/{len(m.types)}; "
                  f"trained with a cached grid search: {', '.join(rep.get('cached_grid_types', [])) or '-'}"
                  f"{'; model-set hit' if m.loaded_from_cache else ''})")
            return dt, m

        print(f"profile {src.name}: {len(lines) - 1} rows; the round appends {len(back)} rows "
              f"({a.rows} each of {', '.join(types)})")
        warm, cold = Path(tmp) / "cache", Path(tmp) / "cache-cold"
        csv.write_bytes(nl.join(kept) + nl)
        t_base, _ = timed("1. base, cold cache", warm)
        csv.write_bytes(nl.join(kept + back) + nl)
        t_inc, m_inc = timed("2. round, base's cache (incremental)", warm)
        t_cold, m_cold = timed("3. round, cold cache (every type trained)", cold)
        same = all(m_inc.arrays()[k].tobytes() == v.tobytes() for k, v in m_cold.arrays().items() if k != "meta")
        t_hit, _ = timed("4. round again (model-set cache hit)", warm)
        os.environ["CL_CACHE_DIR"] = str(warm)
        t0 = time.perf_counter()
        Estimator.from_profile(load_profile(src.name, root))
        t_est = time.perf_counter() - t0
        print(f"{'5. Estimator.from_profile, warm cache':<44} {t_est:8.2f} s")
        print(f"incremental retrain / cold retrain of the round: {t_inc:.2f} / {t_cold:.2f} s = {t_inc / t_cold:.3f} "
              f"({t_cold / t_inc:.1f}x faster); models identical: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
