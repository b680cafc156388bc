"""What ``@ledger.idempotent`` waits for the disk for on a SQLite synchronous=FULL database, seen
in the system calls of a real process (strace): the completion of a new key is synced, its
claim, its lease renewals and its release are committed without a sync of their own."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: Between two syncs of ``<db>.marks``: ``NEW`` new keys completed (each called twice), ``FAILED``
#: calls that raise (their keys released), and one call that outlives its lease several times
#: and prints the lease it still holds.
NEW, FAILED = 6, 3
CHILD = (
    textwrap.dedent(
        """
    import os, sqlite3, sys, time
    from ackledger import Ledger

    path = sys.argv[1]
    with Ledger(path, synchronous="FULL") as ledger:
        work = ledger.idempotent(key=lambda n: f"k{n}")(lambda n: {"n": n})

        @ledger.idempotent(key=lambda n: f"f{n}")
        def fail(n):
            raise RuntimeError(n)

        @ledger.idempotent(key=lambda: "long", lease=1)
        def long():
            started = time.time()
            time.sleep(1.5)
            with sqlite3.connect(path) as conn:
                (until,) = conn.execute(
                    "SELECT lease_expires_at FROM ackledger_idempotency_keys WHERE key = 'long'"
                ).fetchone()
            return until - started

        marks = os.open(path + ".marks", os.O_WRONLY | os.O_CREAT)
        os.fsync(marks)
        for n in range(NEW):
            assert work(n) == work(n) == {"n": n}
        for n in range(FAILED):
            try:
                fail(n)
            except RuntimeError:
                pass
        print(long())
        os.fsync(marks)
    """
    )
    .replace("NEW", str(NEW))
    .replace("FAILED", str(FAILED))
)


def test_only_the_completion_of_a_new_key_is_synced(tmp_path: Path) -> None:
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed")
    db, trace = tmp_path / "keys.db", tmp_path / "trace.txt"
    done = subprocess.run(
        [strace, "-f", "-qq", "-y", "-e", "trace=fsync,fdatasync", "-o", str(trace),
         sys.executable, "-c", CHILD, str(db)],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if done.returncode != 0 and "ptrace" in done.stderr.lower():
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    # The long call's lease was renewed past its first second while it ran.
    assert float(done.stdout) > 1.2, done.stdout
    lines = trace.read_text().splitlines()
    marks = [i for i, line in enumerate(lines) if ".marks>" in line]
    assert len(marks) == 2, lines
    synced = [line for line in lines[marks[0] : marks[1]] if f"{db.name}-wal>" in line]
    # One sync per completed key (the long call's too): none for a claim, a repeat's look, a
    # renewal or a release. Durable claims would add NEW + FAILED + 1 syncs and durable
    # renewals and releases more; a completion that skipped its sync would leave fewer.
    assert len(synced) == NEW + 1, synced
