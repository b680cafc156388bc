"""faststream-outbox, the peer: its own venv, made on demand, and its relay timed from outside.

Its dependencies (FastStream, aio-pika, SQLAlchemy 2 async, asyncpg) are not ours, so it lives
in ``.venv-peer`` at the top of the checkout, made by the first run that needs it with the
pinned versions below. The relay runs in a child process (``peer_child.py``); this side
counts the rows left in its table from another connection every 20 ms and takes the rate
from the first row gone to the last, as ours is taken from its first mark to its last.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import venv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .rabbit import HOST, PORT, Route
from .stopping import terminate

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-peer"
REQUIREMENTS = (
    "faststream-outbox==0.19.*",
    "faststream[rabbit]==0.7.*",
    "sqlalchemy[asyncio]>=2.0",
    "asyncpg>=0.29",
)
CHILD = Path(__file__).with_name("peer_child.py")
POLL_S = 0.02


@dataclass(frozen=True)
class Settings:
    name: str
    workers: int
    fetch: int
    flush: int
    persist: bool

    @property
    def shown(self) -> str:
        return (
            f"{self.workers} worker(s), fetch {self.fetch}, flush {self.flush}, "
            f"persist={self.persist}"
        )


#: Its defaults (``subscriber()``'s and the RabbitMQ publisher's), and the best settings found
#: for it when it was first measured.
DEFAULT = Settings("default", workers=1, fetch=10, flush=1, persist=False)
BEST = Settings("best", workers=4, fetch=500, flush=500, persist=True)


def python() -> Path:
    return VENV / "bin" / "python"


def ensure() -> str | None:
    """Makes the peer's venv if it is not there yet; None when ready, else why not."""
    marker = VENV / ".ready"
    if marker.exists():
        return None
    print(f"  making {VENV} for faststream-outbox (once)", flush=True)
    venv.create(VENV, with_pip=True, clear=True)
    done = subprocess.run(
        [str(python()), "-m", "pip", "install", "--quiet", *REQUIREMENTS],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return f"pip install of the peer failed: {done.stderr.strip().splitlines()[-1:]}"
    marker.write_text("\n".join(REQUIREMENTS) + "\n", encoding="utf-8")
    return None


@dataclass(frozen=True)
class Run:
    rate: float
    #: Rows still in the peer's table when the run stopped.
    rows_left: int


def relay(
    db: str, where: Route, settings: Settings, events: int, event: dict[str, Any], *,
    routing_key: str | None = None, timeout: float = 900.0, settle: float | None = None,
) -> Run:  # fmt: skip
    """Fill the peer's table with ``events`` copies of ``event`` (ids apart) and time its relay.

    ``settle``: instead of waiting for an empty table, stop after that many seconds without a
    change (for a run whose rows may never all go, such as an unroutable one).
    """
    import psycopg

    table = "peer_outbox"
    config = {
        "db": db.replace("postgresql://", "postgresql+asyncpg://", 1),
        "amqp": f"amqp://guest:guest@{HOST}:{PORT}/",
        "exchange": where.exchange,
        "routing_key": where.queue if routing_key is None else routing_key,
        "table": table,
        "queue": "bench",
        "events": events,
        "event": event,
        "workers": settings.workers,
        "fetch": settings.fetch,
        "flush": settings.flush,
        "persist": settings.persist,
    }
    folder = tempfile.mkdtemp(prefix="ackledger-bench-peer-")
    ready = Path(folder) / "ready"
    config["ready"] = str(ready)
    # Its logs (a line per message at its default level) go to /dev/null, as ours do.
    child = subprocess.Popen(
        [str(python()), str(CHILD), json.dumps(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        started = time.monotonic()
        while not ready.exists():
            if child.poll() is not None or time.monotonic() - started > timeout:
                raise RuntimeError(f"faststream-outbox child did not start ({child.returncode})")
            time.sleep(0.05)
        with psycopg.connect(db, autocommit=True) as conn:

            def left() -> int:
                row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
                return int(row[0]) if row else 0

            return _watch(left, events, timeout, settle)
    finally:
        terminate(child, grace=30)
        shutil.rmtree(folder, ignore_errors=True)


def _watch(left: Any, events: int, timeout: float, settle: float | None) -> Run:
    deadline = time.monotonic() + timeout
    first: tuple[float, int] | None = None
    last_change = (time.perf_counter(), events)
    while time.monotonic() < deadline:
        now, count = time.perf_counter(), left()
        if count != last_change[1]:
            last_change = (now, count)
        if first is None and count < events:
            first = (now, count)
        if count == 0:
            break
        if settle is not None and now - last_change[0] > settle:
            return Run(float("nan"), count)
        time.sleep(POLL_S)
    else:
        return Run(float("nan"), left())
    assert first is not None
    span = last_change[0] - first[0]
    return Run(first[1] / span if span > 0 else float("nan"), 0)
