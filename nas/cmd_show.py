"""``nas show``: print a finished or running study from its storage."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from estimator.cliutil import integer
from estimator.errors import UserError

from .report import records, summarize, summary_text, trials_table
from .storage import default_url, open_storage, redact


def register(sub: Any) -> None:
    p = sub.add_parser("show", help="print a study (finished or running)",
                       description="Summary (feasible, rejected by the budget, penalised by CM_O, best, why it won) "
                                   "and the best trials of a study, read from its storage. Without --study, lists "
                                   "the studies in the storage.")
    p.add_argument("--storage", default=None, metavar="URL", help="Optuna storage URL (default sqlite:///OUT/nas.db)")
    p.add_argument("--out", default="nas-out", help="output directory whose nas.db is the default storage")
    p.add_argument("--study", default=None, help="study name")
    p.add_argument("--limit", type=integer(min=0), default=20, help="trials to list (0: all)")
    p.add_argument("--json", action="store_true", help="the summary as JSON")
    p.set_defaults(func=cmd_show)


def cmd_show(args: argparse.Namespace) -> int:
    import optuna  # noqa: PLC0415

    url = args.storage or default_url(args.out)
    try:
        from sqlalchemy.engine import make_url  # noqa: PLC0415

        parsed = make_url(url)
        db = parsed.database if parsed.get_backend_name() == "sqlite" else None
    except Exception:  # noqa: BLE001 - open_storage says what is wrong with it
        db = None
    if db and db != ":memory:" and not Path(db).expanduser().is_file():  # do not create an empty one
        raise UserError(f"no study storage at {db}; give --storage URL or --out DIR")
    storage = open_storage(url)
    names = [s.study_name for s in storage.get_all_studies()]
    if not args.study:
        if not names:
            raise UserError(f"the storage {redact(url)} holds no study")
        print(f"studies in {redact(url)}:")
        for n in names:
            print(f"  {n}")
        return 0
    if args.study not in names:
        raise UserError(f"no study {args.study!r} in {redact(url)}; it holds: {', '.join(names) or 'none'}")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.load_study(study_name=args.study, storage=storage)
    recs = records(study)
    doc = summarize(study, recs)
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
        return 0
    print(summary_text(doc).rstrip("\n"))
    print()
    print(trials_table(recs, limit=args.limit or None).rstrip("\n"))
    return 0
