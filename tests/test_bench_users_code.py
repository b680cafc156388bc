"""The user's-code rows of the benchmark page, and the middleware workload's own checks.

The page is rendered from a stored JSON file of those sections; the middleware workload runs
against the real apps under uvicorn on loopback (its ledger a real SQLite file): a replay
counts only when the endpoint did not run again, so the bare endpoint's "replays" are refused.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from bench import idemmiddleware, report, store
from bench.__main__ import SECTIONS
from bench.idemmiddleware import _load
from bench.userapps import served

from .test_bench_report import ABOUT

MACHINE = {**ABOUT, "load_before": "0 0 0", "load_after": "0 0 0"}


def _figure(key: str, *samples: float) -> dict[str, Any]:
    median = samples[len(samples) // 2]
    return {"key": key, "label": key, "unit": "/s", "median": median, "min": min(samples),
            "max": max(samples), "samples": list(samples), "note": ""}  # fmt: skip


def _section(*figures: dict[str, Any]) -> dict[str, Any]:
    return {"plan": "quick", "command": "python -m bench --quick", "started": "2026-01-01 00:00",
            "seconds": 1.0, "machine": MACHINE, "figures": list(figures), "refused": {},
            "skipped": {}, "notes": []}  # fmt: skip


def test_the_page_shows_each_users_code_figure_and_its_ratio_beside_its_goal(
    tmp_path: Path,
) -> None:
    sections = {
        "orm-consume": _section(_figure("consume.hand", 200), _figure("consume.session", 180)),
        "publish-async": _section(
            _figure("publish_async.plain", 300), _figure("publish_async.ours", 150)
        ),
        "asgi": _section(
            _figure("user.sink.c1.rps", 1000),
            _figure("user.asgi.c1.rps", 500),
            _figure("user.sink.c8.rps", 2000),
            _figure("user.asgi.c8.rps", 1800),
        ),
        "idem-middleware": _section(
            _figure("idem_mw.bare.rps", 900, 1000, 1100),
            _figure("idem_mw.replay.rps", 1200),
            _figure("idem_mw.first.rps", 400),
            _figure("idem_mw.in_tx.rps", 800),
            _figure("idem_mw.extra", 1.5),
            _figure("idem_mw.extra_in_tx", 0.25),
            _figure("idem_mw.syncs.bare", 1.0),
            _figure("idem_mw.syncs.first", 2.0),
            _figure("idem_mw.syncs.in_tx", 1.01),
            _figure("idem_mw.extra_syncs", 1.0),
            _figure("idem_mw.extra_syncs_in_tx", 0.01),
        ),
    }
    path = tmp_path / "benchmarks.json"
    store.save(sections, path)
    page = report.render(store.load(path), list(SECTIONS))
    rows = {line.split(" | ")[0].lstrip("| "): line for line in page.splitlines()}

    def row(start: str) -> str:
        return next(line for label, line in rows.items() if label.startswith(start))

    assert "| 0.90 x | ≥ 0.8 | yes |" in row("`consume --session` (ORM handler) /")
    assert "| 2.00 x | ≤ 1.5 | **no** |" in row("a transaction with `publish_async`")
    assert "| 0.50 x | ≥ 0.8 | **no** |" in row("`Inbox.asgi()` under uvicorn / `serve sink`, 1")
    assert "| 0.90 x | ≥ 0.8 | yes |" in row("`Inbox.asgi()` under uvicorn / `serve sink`, 8")
    assert "| 1.20 x | ≥ 1 | yes |" in row("`IdempotencyMiddleware` replay /")
    assert "| 0.40 x | — |" in row("`IdempotencyMiddleware` first request (default) /")
    assert "| 0.80 x | — |" in row("`IdempotencyMiddleware` first request, completed in")
    assert "| 1,000 (900 to 1,100) |" in row("bare endpoint under uvicorn")
    assert "| 1,000 / 2,000 |" in row("`serve sink` /events, 1 / 8")
    assert "| 400 |" in row("`IdempotencyMiddleware`, a new key each request, the middleware")
    assert "| 800 |" in row("`IdempotencyMiddleware`, a new key each request, the endpoint")
    # The goal is on durable commits, counted; the extra time is shown beside them.
    assert "| 1.00 / 2.00 / 1.01 |" in row("durable commits a request, counted by strace")
    assert "(goal ≤ 1) | 1.00 |" in row(
        "a first request's durable commits over the bare endpoint's, the middleware completes"
    )
    assert "(goal ≤ 1) | 0.01 |" in row(
        "a first request's durable commits over the bare endpoint's, the key completed in"
    )
    default = row("a first request's extra time, the middleware completes the key (default)")
    assert "| 1.50 |" in default and "goal" not in default
    in_tx = row("a first request's extra time, the key completed in")
    assert "| 0.25 |" in in_tx and "goal" not in in_tx
    assert page.index("## The user's own code") < page.index("## Floors and ratios")
    assert json.loads(path.read_text())["sections"]["asgi"]["plan"] == "quick"


def test_the_consumers_ratio_is_the_median_of_each_rounds_own(tmp_path: Path) -> None:
    """Medians of 200 and 180 would say 0.90: the rounds' own ratios say 0.75."""
    section = _section(
        _figure("consume.hand", 150, 200, 250),
        _figure("consume.session", 120, 180, 190),
        _figure("consume.paired", 0.7, 0.75, 0.8),
    )
    path = tmp_path / "benchmarks.json"
    store.save({"orm-consume": section}, path)
    page = report.render(store.load(path), list(SECTIONS))
    (ratio,) = [line for line in page.splitlines() if "`consume --session` (ORM handler) /" in line]
    assert "| 0.75 x | ≥ 0.8 | **no** |" in ratio
    assert "| 0.75 (0.70 to 0.80) |" in page


def test_a_replay_counts_only_if_the_endpoint_did_not_run_again(tmp_path: Path) -> None:
    orders = str(tmp_path / "orders.db")
    for app in ("idempotent_app", "in_transaction_app"):
        ledger = str(tmp_path / f"{app}.db")
        with served(app, tmp_path, BENCH_LEDGER_DB=ledger, BENCH_ORDERS_DB=orders) as base:
            replay = _load(base, "replay", "t", 0.3)
            first = _load(base, "first", "t", 0.3)
        assert replay.requests > 3 and replay.all_expected, (app, replay.wrong)
        assert first.requests > 3 and first.all_expected, (app, first.wrong)
    # The endpoint wrote its rows and the keys in one file: one row per key it ran for.
    with sqlite3.connect(ledger) as db:
        (rows,) = db.execute("SELECT COUNT(*) FROM t").fetchone()
        (keys,) = db.execute(
            "SELECT COUNT(*) FROM ackledger_idempotency_keys WHERE state = 'completed'"
        ).fetchone()
    assert rows == keys == first.requests + 1
    # Without the middleware every "replay" runs the endpoint: refused, never a rate.
    with served("bare_app", tmp_path, BENCH_ORDERS_DB=orders) as base:
        bare = _load(base, "replay", "t", 0.3)
    assert bare.requests > 3 and not bare.all_expected
    assert any("the endpoint ran" in why for why in bare.wrong)


def test_durable_commits_are_the_wal_syncs_less_each_checkpoints_two() -> None:
    """Three commits (one cut in two by strace), then a checkpoint (the WAL synced before it,
    the database file, the restarted WAL's header), a fourth commit, and a file that is not a
    database's."""
    trace = "\n".join(
        [
            "101 fdatasync(5</t/ledger-0.db-wal>) = 0",
            "101 fdatasync(7</t/orders-0.db-wal>) = 0",
            "102 fdatasync(5</t/ledger-0.db-wal> <unfinished ...>",
            "101 fdatasync(9</t/log.txt>) = 0",
            "102 <... fdatasync resumed>) = 0",
            "101 fsync(5</t/ledger-0.db-wal>) = 0",
            "101 fsync(4</t/ledger-0.db>) = 0",
            "101 fsync(5</t/ledger-0.db-wal>) = 0",
            "101 fdatasync(5</t/ledger-0.db-wal>) = 0",
        ]
    )
    assert idemmiddleware.commits_in(trace) == 4
    assert idemmiddleware.commits_in("") == 0
