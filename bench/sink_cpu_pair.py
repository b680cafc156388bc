"""The sink's CPU per request, two copies side by side: ``serve sink`` from two ``src`` folders
at once, one keep-alive ``http.client`` client, new events then a re-sent one, in short rounds
alternated ABBA; medians of each process's ``/proc`` CPU per request.

``python -m bench.sink_cpu_pair --rounds 6 --seconds 2 main=/work/main/src current=src``

Both servers run during the whole measurement, so the load of a shared machine falls on both
alike; the client is the same code for both, so only the server differs.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from time import monotonic

from .common import cpu_seconds
from .fill import lab_event

_SERVE = "import sys; from ackledger.cli import main; sys.exit(main())"
_HEADERS = {"Content-Type": "application/cloudevents+json"}


def _start(src: str, db: Path) -> tuple[subprocess.Popen[str], int]:
    command = [sys.executable, "-c", _SERVE, "serve", "sink", "--db", str(db), "--port", "0"]
    env = {**os.environ, "PYTHONPATH": src}
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # "ackledger sink listening on http://127.0.0.1:PORT"
    return process, int(line.rsplit(":", 1)[1])


def _load(port: int, seconds: float, tag: str, duplicate: bool) -> int:
    """Requests made in ``seconds``: new events (``tag``), or one event sent again and again."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    count, end = 0, monotonic() + seconds
    try:
        while monotonic() < end:
            event_id = "again" if duplicate else f"{tag}-{count}"
            body = json.dumps(lab_event(event_id, "s1" if duplicate else f"s{count % 64}", 1))
            conn.request("POST", "/events", body.encode(), _HEADERS)
            answer = conn.getresponse()
            answer.read()
            if answer.status != 200:
                raise RuntimeError(f"the sink answered {answer.status}")
            count += 1
    finally:
        conn.close()
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sink_cpu_pair", description=__doc__)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("variants", nargs=2, help="NAME=SRC")
    args = parser.parse_args(argv)
    names = [variant.split("=", 1)[0] for variant in args.variants]
    with tempfile.TemporaryDirectory() as folder:
        servers = {
            name: _start(variant.split("=", 1)[1], Path(folder) / f"{name}.db")
            for name, variant in zip(names, args.variants, strict=True)
        }
        cpu: dict[tuple[str, str], list[float]] = {}
        try:
            for _, port in servers.values():
                _load(port, 0.3, "warm", duplicate=True)
            for round_number in range(args.rounds):
                order = names if round_number % 2 == 0 else names[::-1]
                for mode in ("new", "duplicate"):
                    for name in order:
                        process, port = servers[name]
                        before = cpu_seconds(process.pid)
                        tag = f"r{round_number}"
                        count = _load(port, args.seconds, tag, mode == "duplicate")
                        spent = 1e6 * (cpu_seconds(process.pid) - before) / count
                        cpu.setdefault((name, mode), []).append(spent)
        finally:
            for process, _ in servers.values():
                process.terminate()
                process.wait(30)
    first, second = names
    for mode in ("new", "duplicate"):
        a, b = (statistics.median(cpu[(name, mode)]) for name in names)
        rounds = {name: [round(x) for x in cpu[(name, mode)]] for name in names}
        print(
            f"{mode}: {first} {a:.0f} µs, {second} {b:.0f} µs a request, {second}/{first} "
            f"{b / a:.2f} (rounds {rounds})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
