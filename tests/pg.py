"""A throwaway PostgreSQL server for tests: ``initdb`` + ``pg_ctl`` in a temporary directory,
listening on a free loopback port, trust authentication, removed afterwards.

.. code-block:: python

    from tests.pg import PostgresServer, postgres_binaries

    with PostgresServer() as pg:          # pytest.skip()s only if the binaries are missing
        url = pg.url("nas")              # postgresql+psycopg2://nas@127.0.0.1:PORT/nas

The binaries are looked up on ``PATH`` and in ``/usr/lib/postgresql/*/bin`` (Debian's
``apt-get install -y postgresql`` puts them there). PostgreSQL refuses to run as root, so
when the tests run as root the server runs as the ``postgres`` user (created by the
Debian package) or ``nobody``, which then owns the temporary directory.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["PostgresServer", "postgres_binaries", "free_port", "SKIP_REASON"]

SKIP_REASON = ("PostgreSQL server binaries (initdb, pg_ctl, createdb) not found on PATH or in "
               "/usr/lib/postgresql/*/bin; install them with `apt-get install -y postgresql`")


def postgres_binaries() -> Path | None:
    """The directory holding initdb, pg_ctl and createdb (newest version), or None."""
    cands: list[Path] = []
    w = shutil.which("initdb")
    if w:
        cands.append(Path(os.path.realpath(w)).parent)

    def version(p: str) -> tuple[int, ...]:
        part = Path(p).parts[-3]
        return tuple(int(x) for x in part.split(".") if x.isdigit()) or (0,)

    for p in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version, reverse=True):
        cands.append(Path(p).parent)
    for d in cands:
        if all((d / b).is_file() and os.access(d / b, os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return d
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' user exists to run PostgreSQL")


class PostgresServer:
    """Start on ``__enter__`` (or :meth:`start`), stop and delete on ``__exit__`` (or :meth:`stop`)."""

    def __init__(self, *, user: str = "nas", port: int | None = None, bin_dir: Path | None = None) -> None:
        self.bin_dir = bin_dir or postgres_binaries()
        self.user = user
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.root: Path | None = None
        self._account = _run_as()
        self._started = False

    # ---------------------------------------------------------------- plumbing
    def _cmd(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        assert self.bin_dir is not None
        kwargs: dict[str, Any] = {}
        if self._account is not None:
            kwargs.update(user=self._account.pw_uid, group=self._account.pw_gid, extra_groups=[])
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C", HOME=str(self.root))
        p = subprocess.run([str(self.bin_dir / args[0]), *args[1:]], capture_output=True, text=True, env=env,
                           cwd=str(self.root), timeout=timeout, **kwargs)
        if check and p.returncode != 0:
            log = ""
            if self.root is not None and (self.root / "server.log").is_file():
                log = (self.root / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{' '.join(args)} failed ({p.returncode}): {p.stderr.strip() or p.stdout.strip()}"
                               f"{chr(10) + log if log else ''}")
        return p

    def url(self, database: str = "nas", driver: str = "postgresql+psycopg2") -> str:
        return f"{driver}://{self.user}@{self.host}:{self.port}/{database}"

    # ---------------------------------------------------------------- life cycle
    def start(self) -> "PostgresServer":
        if self.bin_dir is None:
            import pytest  # noqa: PLC0415

            pytest.skip(SKIP_REASON)
        self.root = Path(tempfile.mkdtemp(prefix="nas-pg-"))
        if self._account is not None:
            os.chown(self.root, self._account.pw_uid, self._account.pw_gid)
        os.chmod(self.root, 0o700)
        data = self.root / "data"
        self._cmd("initdb", "-D", str(data), "-U", self.user, "--auth=trust", "-E", "UTF8", "--no-sync",
                  "--no-instructions")
        opts = (f"-c listen_addresses={self.host} -p {self.port} -k {self.root} -F "
                f"-c max_connections=100 -c shared_buffers=32MB")
        self._cmd("pg_ctl", "-D", str(data), "-l", str(self.root / "server.log"), "-o", opts, "-w", "-t", "60",
                  "start")
        self._started = True
        return self

    def createdb(self, name: str) -> str:
        """Create database ``name``; returns its SQLAlchemy URL."""
        self._cmd("createdb", "-h", self.host, "-p", str(self.port), "-U", self.user, name)
        return self.url(name)

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._cmd("pg_isready", "-h", self.host, "-p", str(self.port), check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"PostgreSQL on port {self.port} is not ready after {timeout} s")

    def stop(self) -> None:
        try:
            if self._started and self.root is not None:
                self._cmd("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop", check=False,
                          timeout=60)
        finally:
            self._started = False
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)
                self.root = None

    def __enter__(self) -> "PostgresServer":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.stop()
