"""A private PostgreSQL cluster that a test may stop and start at will.

The shared server on 127.0.0.1:5432 serves every engineer's tests and must never be stopped, so
database-outage tests run the worker against a cluster of their own: ``initdb`` into a temporary
folder, ``pg_ctl start`` on a free loopback port, trust authentication, fsync off (durability
across a *server process* stop does not need it; only a power cut would).

PostgreSQL refuses to run as root; when the tests run as root, the binaries run as the
``postgres`` system user (``runuser``) and the folder is handed to that user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["PrivatePostgres", "find_pg_bin", "free_port"]


def find_pg_bin() -> Path:
    """The newest ``/usr/lib/postgresql/*/bin`` holding ``pg_ctl`` (or ``$PG_BIN``)."""
    override = os.environ.get("PG_BIN")
    candidates = [override] if override else sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
    )
    for folder in reversed(candidates):
        if folder and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    raise FileNotFoundError("no PostgreSQL server binaries: set PG_BIN to the folder of pg_ctl")


def free_port() -> int:
    """A loopback TCP port that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class PrivatePostgres:
    """One throw-away PostgreSQL cluster under ``folder``, listening on ``127.0.0.1:port``.

    ``start(tcp=False)`` starts it reachable through its Unix socket only: the worker (which
    connects over TCP) still sees an outage while the test reads the database.
    """

    def __init__(self, folder: Path, port: int | None = None) -> None:
        self.bin = find_pg_bin()
        self.folder = folder
        self.data = folder / "data"
        self.sockets = folder / "sockets"
        self.port = port or free_port()
        self._user = "postgres" if os.geteuid() == 0 else None

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the ``postgres`` database over TCP (what the worker uses)."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def socket_url(self) -> str:
        """The same database through the Unix socket (works while TCP is closed)."""
        return f"postgresql+psycopg://postgres@/postgres?host={self.sockets}&port={self.port}"

    def init(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.sockets.mkdir(exist_ok=True)
        if self._user:
            entry = pwd.getpwnam(self._user)
            for path in (self.folder, self.sockets):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  "-E", "UTF8", "--no-sync", "--no-instructions")

    def start(self, tcp: bool = True, timeout_s: float = 60.0) -> None:
        listen = "127.0.0.1" if tcp else "''"
        options = (f"-p {self.port} -c listen_addresses={listen} "
                   f"-c unix_socket_directories={self.sockets} -c fsync=off "
                   "-c full_page_writes=off -c max_connections=50")
        self._run("pg_ctl", "start", "-D", str(self.data), "-w", "-t", str(int(timeout_s)),
                  "-o", options, "-l", str(self.folder / "server.log"))

    def stop(self, mode: str = "fast") -> None:
        """``fast`` disconnects every client and stops cleanly; ``immediate`` is a crash."""
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", mode, "-w", "-t", "60")

    @property
    def running(self) -> bool:
        status = self._run("pg_ctl", "status", "-D", str(self.data), check=False)
        return status.returncode == 0

    def wait_tcp(self, timeout_s: float = 30.0) -> None:
        """Until a TCP connection to the port is accepted."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def destroy(self) -> None:
        if self.data.exists() and self.running:
            self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)

    def log(self) -> str:
        path = self.folder / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(self.bin / tool), *args]
        if self._user:
            argv = ["runuser", "-u", self._user, "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr or done.stdout}"
                               f"\n{self.log()[-2000:]}")
        return done
