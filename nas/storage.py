"""Study storage: SQLite by default, PostgreSQL (or any SQLAlchemy URL) for several workers.

Every search opens an Optuna :class:`~optuna.storages.RDBStorage` with heartbeats: each
running trial's worker writes a heartbeat every ``heartbeat_interval`` seconds. A trial
whose heartbeat is older than ``grace_period`` (a worker killed, a machine gone) is marked
FAIL by the next worker that starts a trial, and :class:`RetryFailedTrialCallback` puts a
copy of it (same parameters, ``failed_trial``/``retry_history`` in its system
attributes) back in the queue, so the architecture is evaluated after all.
"""
from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

from estimator.errors import UserError

__all__ = ["StorageError", "default_url", "redact", "open_storage", "DB_FILE"]

DB_FILE = "nas.db"


class StorageError(UserError):
    """The study storage cannot be opened."""


def default_url(out_dir: str | Path) -> str:
    """The default storage: ``sqlite:///<out>/nas.db`` (absolute)."""
    return f"sqlite:///{(Path(out_dir).expanduser().resolve() / DB_FILE).as_posix()}"


def redact(url: str) -> str:
    """The URL with its password hidden (for messages and reports)."""
    try:
        from sqlalchemy.engine import make_url  # noqa: PLC0415

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL we can parse: say nothing secret
        return url.split("@")[-1] if "@" in url else url


def _one_line(e: BaseException) -> str:
    s = str(getattr(e, "orig", None) or e).strip().splitlines()
    return s[0][:400] if s else type(e).__name__


def _sqlite_wal(storage: Any) -> None:
    """WAL journal + synchronous=NORMAL on every connection: a trial writes a few dozen small
    transactions (one per suggested parameter and attribute); in the default rollback-journal
    mode each costs an fsync (tens of ms), in WAL mode a fraction of that. Durable across a
    crashed or killed process; several local workers can read while one writes."""
    from sqlalchemy import event  # noqa: PLC0415

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        finally:
            cur.close()

    event.listen(storage.engine, "connect", on_connect)
    storage.engine.dispose()


def _create(cls: Any, url: str, engine_kwargs: dict[str, Any], kwargs: dict[str, Any], attempts: int = 6) -> Any:
    """RDBStorage(...), retried when workers starting together race to create the schema.

    On a fresh database every worker's RDBStorage creates the tables (and, on PostgreSQL,
    enum types) and stamps the schema version; two doing so at once collide with
    "already exists" / unique-violation errors. The schema creation is idempotent once one
    of them has finished, so trying again after a short random pause succeeds.
    """
    import random  # noqa: PLC0415

    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError  # noqa: PLC0415

    for attempt in range(attempts):
        try:
            return cls(url, engine_kwargs=dict(engine_kwargs), **kwargs)
        except (IntegrityError, ProgrammingError, OperationalError) as e:
            msg = str(e).lower()
            racing = ("already exists" in msg or "duplicate" in msg or "unique" in msg or "locked" in msg)
            if not racing or attempt == attempts - 1:
                raise
            time.sleep(0.2 + random.random() * (0.3 + 0.3 * attempt))
    raise AssertionError("unreachable")


def open_storage(url: str, *, heartbeat_interval: int | None = None, grace_period: int | None = None,
                 max_retry: int = 3) -> Any:
    """An RDBStorage for ``url``; with ``heartbeat_interval`` (seconds), heartbeats and retries."""
    import optuna  # noqa: PLC0415
    from optuna.storages import RDBStorage, RetryFailedTrialCallback  # noqa: PLC0415

    try:
        from sqlalchemy.engine import make_url  # noqa: PLC0415

        parsed = make_url(url)
    except Exception as e:  # noqa: BLE001
        raise StorageError(f"--storage {url!r} is not a database URL (e.g. sqlite:///nas.db or "
                           f"postgresql://user@host/db): {_one_line(e)}") from None
    backend = parsed.get_backend_name()
    engine_kwargs: dict[str, Any] = {}
    if backend == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine_kwargs["connect_args"] = {"timeout": 120}
    elif backend == "postgresql":
        driver = parsed.get_driver_name()
        if driver in ("psycopg2", "") or driver is None:
            import importlib.util  # noqa: PLC0415

            if importlib.util.find_spec("psycopg2") is None:
                raise StorageError("PostgreSQL storage needs psycopg2: pip install 'confident-latency[postgres]' "
                                   "(psycopg2-binary)") from None
        engine_kwargs["pool_pre_ping"] = True
    kwargs: dict[str, Any] = {}
    if heartbeat_interval:
        if heartbeat_interval < 1:
            raise StorageError(f"--heartbeat must be >= 1 second, got {heartbeat_interval}")
        kwargs.update(heartbeat_interval=int(heartbeat_interval),
                      grace_period=int(grace_period or 2 * heartbeat_interval))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            warnings.simplefilter("ignore", FutureWarning)
            if heartbeat_interval:
                # Optuna >= 4.9 renamed the hook (and the callback class); older ones know the first name only
                retry_cls = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)
                if retry_cls is not None:
                    kwargs["heartbeat_stale_trial_callback"] = retry_cls(max_retry=max_retry)
                else:
                    kwargs["failed_trial_callback"] = RetryFailedTrialCallback(max_retry=max_retry)
            storage = _create(RDBStorage, url, engine_kwargs, kwargs)
        if backend == "sqlite":
            _sqlite_wal(storage)
        return storage
    except ImportError as e:
        raise StorageError(f"cannot open the study storage {redact(url)}: a database driver is missing "
                           f"({_one_line(e)})") from None
    except Exception as e:  # noqa: BLE001 - SQLAlchemy's OperationalError and friends
        raise StorageError(f"cannot open the study storage {redact(url)}: {type(e).__name__}: {_one_line(e)}") \
            from None
