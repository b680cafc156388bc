"""Where the CPU of one event goes, by layer (issue 18): ``python -m bench.layers``.

Each scenario runs a driver process (the relay's side) against a server process (the sink's
side) on loopback; ``perf record -e cpu-clock -g`` samples both while the driver does a fixed
number of events, and each process's CPU per event (``/proc/PID/stat``) is split by where its
samples fell:

- ``disk``: the kernel inside a database system call (fsync, pwrite, pread, fcntl locks...);
- ``net+loop``: the kernel inside any other system call (send, recv, poll, epoll...);
- ``kernel``: the kernel outside a system call of this process (interrupts, the scheduler);
- ``sqlite``: libsqlite3 and Python's ``_sqlite3`` module;
- ``python``: the interpreter (libpython);
- ``C ext``: the other compiled modules (uvloop, httptools, ``_json``, hashing...) and libc.

The scenarios: ``serve sink`` taking new events and the same event again from ``send_http``;
the per-item relay (``dispatch`` + ``send_http``) and the sink it sends to; the guarded
hand-over (``bench/guarded_relay.py``, ``bench/guarded_sink.py``: the contract's work in the
least Python); and the zero-code hand-over of ``bench/floors.py`` (bare ``sqlite3`` marks, a
raw socket, ``rawserver.py --commit``). perf is a sampling profiler: the split is a share of
samples (a few percent either way at the defaults), the totals are the kernel's CPU
accounting. Needs ``perf`` (Debian's linux-perf) with the ``cpu-clock`` event; where it is
missing, says so and exits 0.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from ackledger._dev.procs import Service, start_listener

from . import fill
from .common import cpu_seconds, scratch
from .rawserver import one_row_committer
from .relay import start_sink

LAYERS = ("disk", "net+loop", "kernel", "sqlite", "python", "C ext")
RAWSERVER = Path(__file__).with_name("rawserver.py")
#: System calls a SQLite database makes (file writes, syncs, locks, reads, the WAL's mmap).
_DISK_CALLS = re.compile(
    r"sys_(fsync|fdatasync|pwrite64|pread64|fcntl|ftruncate|openat|close|newfstat|fstat|"
    r"unlink|access|mmap|munmap|lseek)\b"
)
_ANY_CALL = re.compile(r"(__x64_sys_|__ia32_sys_|do_syscall_64)")


def perf_ready() -> bool:
    if shutil.which("perf") is None:
        return False
    probe = subprocess.run(
        ["perf", "record", "-e", "cpu-clock", "-o", "/dev/null", "--", "true"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def _layer(frames: list[str]) -> str:
    """The layer of one sample, from its call chain (innermost frame first)."""
    top = frames[0]
    if "[kernel" in top or "kallsyms" in top:
        chain = " ".join(frames)
        if _DISK_CALLS.search(chain):
            return "disk"
        if _ANY_CALL.search(chain):
            return "net+loop"
        return "kernel"
    if "sqlite3" in top:
        return "sqlite"
    if "libpython" in top or "/bin/python" in top:
        return "python"
    return "C ext"


def split_samples(data: Path) -> dict[int, Counter[str]]:
    """Samples per layer, per pid, from ``perf script`` of a call-graph recording."""
    out = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "pid,ip,sym,dso"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: dict[int, Counter[str]] = {}
    for block in out.split("\n\n"):
        lines = [line.strip() for line in block.strip().splitlines() if line.strip()]
        if not lines:
            continue
        head = lines[0].split()
        if not head or not head[0].isdigit():
            continue
        # The first line holds the pid and, without a call chain, the sample's own frame.
        frames = lines[1:] or [" ".join(head[1:])]
        found.setdefault(int(head[0]), Counter())[_layer(frames)] += 1
    return found


# -- drivers: run as ``python -m bench.layers --drive KIND ...`` in a process of their own ---


def _drive(kind: str, url: str, count: int, folder: Path) -> None:
    """Warm up, say "ready", wait for a line on stdin, do ``count`` events, say "done"."""
    from ackledger import Outbox
    from ackledger.source.dispatch import dispatch
    from ackledger.wire.http import send_http

    events = [fill.lab_event(f"{kind}-{n}", f"s{n % 64}", 1) for n in range(count + 1)]
    if kind == "relay":
        fill.pending_events(folder / "relay.db", "L", count + 1)
        outbox = Outbox(folder / "relay.db", synchronous="FULL")
        dispatch(outbox, lambda event: send_http(event, url), 1)

        def work() -> None:
            done = 0
            while done < count:
                done += len(dispatch(outbox, lambda event: send_http(event, url), 16))

    elif kind in ("new", "dup"):
        send_http(events[0], url)
        todo = events[1:] if kind == "new" else [events[0]] * count

        def work() -> None:
            for event in todo:
                send_http(event, url)

    elif kind == "guarded":
        from .guarded_relay import GuardedRelay, fill_outbox

        fill_outbox(folder / "guarded-source.db", "G", count + 1)
        relay = GuardedRelay(folder / "guarded-source.db", url.removesuffix("/events"))
        relay.step()

        def work() -> None:
            for _ in range(count):
                relay.step()

    else:  # the zero-code hand-over's relay side: a bare FULL commit and a raw round trip
        host, port = url.split("//")[1].split("/", maxsplit=1)[0].split(":")
        conn = socket.create_connection((host, int(port)))
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        body = b'{"specversion":"1.0","id":"x","source":"/floor","type":"t"}'
        request = (
            b"POST /events HTTP/1.1\r\nhost: x\r\ncontent-type: application/cloudevents+json"
            b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        mark = one_row_committer(str(folder / "zero-source.db"))

        def work() -> None:
            for _ in range(count):
                conn.sendall(request)
                answer = conn.recv(65536)
                while b"}" not in answer:
                    answer += conn.recv(65536)
                mark()

    print("ready", flush=True)
    sys.stdin.readline()
    started = time.perf_counter()
    work()
    print(f"done {time.perf_counter() - started:.6f}", flush=True)


def _server(folder: Path, kind: str) -> Service:
    if kind == "guarded":
        command = [sys.executable, "-m", "bench.guarded_sink", "--db"]
        command.append(str(folder / f"guarded-sink-{time.monotonic_ns()}.db"))
        return start_listener(command, env={"PYTHONPATH": str(Path(__file__).parent.parent)})
    if kind == "raw":
        command = [sys.executable, str(RAWSERVER), "--commit", str(folder / "zero-sink.db")]
        return start_listener(command)
    return start_sink(folder, f"sink-{time.monotonic_ns()}")


def scenario(
    folder: Path, name: str, server_kind: str, drive: str, *, count: int, frequency: int
) -> dict[str, dict[str, float]]:
    """{process: {layer: µs per event, "total": µs per event}} for one scenario."""
    with _server(folder, server_kind) as service:
        server, url = service.process, service.base_url + "/events"
        driver = subprocess.Popen(
            [sys.executable, "-m", "bench.layers", "--drive", drive, url, str(count), str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent.parent,
        )
        assert driver.stdin is not None and driver.stdout is not None
        if driver.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{name}: the driver did not start")
        data = folder / f"{name}.perf"
        pids = {"relay side": driver.pid, "sink side": server.pid}
        perf = subprocess.Popen(
            ["perf", "record", "-e", "cpu-clock", "-F", str(frequency), "-g", "-o", str(data),
             "-p", ",".join(str(pid) for pid in pids.values())],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(0.5)  # perf attaches
        before = {what: cpu_seconds(pid) for what, pid in pids.items()}
        driver.stdin.write("go\n")
        driver.stdin.flush()
        finished = driver.stdout.readline()
        after = {what: cpu_seconds(pid) for what, pid in pids.items()}
        perf.send_signal(signal.SIGINT)
        perf.wait()
        driver.stdin.close()
        driver.wait()
        if not finished.startswith("done"):
            raise RuntimeError(f"{name}: the driver failed")
        wall = float(finished.split()[1])
    samples = split_samples(data)
    figures: dict[str, dict[str, float]] = {"wall": {"total": 1e6 * wall / count}}
    for what, pid in pids.items():
        total = 1e6 * (after[what] - before[what]) / count
        mine = samples.get(pid, Counter())
        seen = sum(mine.values()) or 1
        row = {layer: total * mine[layer] / seen for layer in LAYERS}
        row["total"] = total
        figures[what] = row
    return figures


SCENARIOS = (
    # name, server, driver
    ("serve sink, new events (send_http)", "sink", "new"),
    ("serve sink, the same event again (send_http)", "sink", "dup"),
    ("per-item relay (dispatch + send_http) -> serve sink", "sink", "relay"),
    ("guarded hand-over (bench.guarded_relay -> bench.guarded_sink)", "guarded", "guarded"),
    ("zero-code hand-over (bare marks, raw socket, rawserver --commit)", "raw", "zero"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.layers", description=__doc__)
    parser.add_argument("--events", type=int, default=3000, help="events per scenario")
    parser.add_argument("--frequency", type=int, default=1999, help="perf samples per second")
    parser.add_argument("--drive", nargs=4, metavar=("KIND", "URL", "COUNT", "FOLDER"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args(argv)
    if args.drive:
        kind, url, count, folder = args.drive
        _drive(kind, url, int(count), Path(folder))
        return 0
    if not perf_ready():
        print("bench.layers: perf with the cpu-clock event is not available here; nothing measured")
        return 0
    print(f"CPU per event by layer, µs ({args.events} events per scenario; perf cpu-clock)")
    print(f"  {'':12s}" + "".join(f"{layer:>10s}" for layer in (*LAYERS, "total")))
    with scratch("layers") as folder:
        for name, server_kind, drive in SCENARIOS:
            figures = scenario(
                folder, drive, server_kind, drive, count=args.events, frequency=args.frequency
            )
            print(f"{name}: {figures['wall']['total']:.0f} µs per event (wall, under perf)")
            for what in ("relay side", "sink side"):
                row = figures[what]
                cells = "".join(f"{row[layer]:10.0f}" for layer in (*LAYERS, "total"))
                print(f"  {what:12s}{cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
