"""docs/benchmarks.md, rendered from the figures stored in docs/benchmarks.json.

The page is what a user reads to know what to expect: the headline table first, then the
services under concurrent clients and the two peers, then the floors every ratio divides by and
the method. A figure whose workload did not get the answers it expected is shown as refused
with its status histogram, never as a number.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import idempotent, latency, moved, store
from .brokers import INFLIGHT, ratios
from .common import Results

NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class Ratio:
    """One figure divided by another of the same run, with its goal where it has one."""

    label: str
    top: str
    bottom: str
    #: "at least" (the ratio must reach the goal), "at most", or "" (shown, no goal).
    kind: str = ""
    goal: float = 0.0
    #: A figure of each round's own top / bottom: its median is the ratio when it was
    #: measured (a drift between rounds then moves both sides of each sample alike).
    paired: str = ""

    def value(self, results: Results) -> float | None:
        paired = results.get(self.paired) if self.paired else None
        if paired is not None and not math.isnan(paired):
            return paired
        top, bottom = results.get(self.top), results.get(self.bottom)
        if top is None or not bottom or math.isnan(top) or math.isnan(bottom):
            return None
        return top / bottom

    def met(self, results: Results) -> bool | None:
        value = self.value(results)
        if value is None or not self.kind:
            return None
        return value >= self.goal if self.kind == "at least" else value <= self.goal


RATIOS = (
    Ratio("per-item relay / per-item floor (2 FULL commits + 1 http.client round trip)",
          "relay.item", "floor.relay", "at least", 0.8),
    Ratio("per-item relay / zero-code hand-over (raw socket, bare sqlite3 on both sides)",
          "relay.item", "floor.handover", "at least", 0.7),
    Ratio("`ackledger relay --pipeline` / zero-code hand-over measured around it",
          "relay.item_daemon_pipeline", "relay.item_floor", "at least", 0.7),
    Ratio("batch relay / per-item relay", "relay.batch", "relay.item", "at least", 10.0),
    Ratio("a new event through `serve sink` / (raw round trip + FULL commit)",
          "step.sink_new", "floor.step_new", "at most", 1.5),
    Ratio("a duplicate through `serve sink` / (raw round trip + read by key)",
          "step.sink_dup", "floor.step_dup", "at most", 1.5),
    Ratio("the relay's own step (pending + mark) / one FULL commit",
          "step.relay_own", "floor.step_commit", "at most", 1.5),
    Ratio("accept, synchronous=FULL / one FULL commit", "accept.full", "floor.commit_full"),
    Ratio("ledger FULL / Powertools+Redis", "ledger.full", "ledger.powertools", "at least", 2.0),
    Ratio("ledger NORMAL / Powertools+Redis", "ledger.normal", "ledger.powertools",
          "at least", 10.0),
    Ratio("ledger FULL / bare sqlite3 loop of the same statements", "ledger.full",
          "ledger.raw_full"),
    Ratio("pending(16) latency, 100,000 / 10,000 sent rows", "growth.pending.100000",
          "growth.pending.10000", "at most", 1.5),
    Ratio("relay RSS, 100,000 / 10,000 sent rows", "growth.rss.100000", "growth.rss.10000",
          "at most", 1.1),
)  # fmt: skip


#: The user's own code against what the user would write or run without ackledger.
USER_RATIOS = (
    Ratio("`consume --session` (ORM handler) / hand-written pika + SQLAlchemy consumer",
          "consume.session", "consume.hand", "at least", 0.8, paired="consume.paired"),
    Ratio("a transaction with `publish_async` / the same with a plain row, in time",
          "publish_async.plain", "publish_async.ours", "at most", 1.5),
    Ratio("`Inbox.asgi()` under uvicorn / `serve sink`, 1 client", "user.asgi.c1.rps",
          "user.sink.c1.rps", "at least", 0.8),
    Ratio("`Inbox.asgi()` under uvicorn / `serve sink`, 8 clients", "user.asgi.c8.rps",
          "user.sink.c8.rps", "at least", 0.8),
    Ratio("`IdempotencyMiddleware` replay / the bare endpoint", "idem_mw.replay.rps",
          "idem_mw.bare.rps", "at least", 1.0),
    Ratio("`IdempotencyMiddleware` first request (default) / the bare endpoint",
          "idem_mw.first.rps", "idem_mw.bare.rps"),
    Ratio("`IdempotencyMiddleware` first request, completed in the endpoint's transaction / "
          "the bare endpoint", "idem_mw.in_tx.rps", "idem_mw.bare.rps"),
)  # fmt: skip


def _num(value: float | None) -> str:
    if value is None or math.isnan(value):
        return NOT_MEASURED
    if abs(value) < 10:
        return f"{value:.2f}"
    if abs(value) < 100:
        return f"{value:.1f}"
    return f"{value:,.0f}"


class Page:
    """Looks figures up for the tables: a number, "refused (...)" or "not measured"."""

    def __init__(self, results: Results) -> None:
        self.results = results

    def cell(self, key: str, *, spread: bool = False, whole: bool = False) -> str:
        refused = self.results.refused.get(key)
        if refused is not None:
            return f"**refused** ({refused['why']})"
        figure = self.results.figures.get(key)
        if figure is None or not figure.samples or math.isnan(figure.median):
            return NOT_MEASURED
        text = f"{figure.median:,.0f}" if whole else _num(figure.median)
        if spread and len(figure.samples) > 1:
            text += f" ({_num(figure.low)} to {_num(figure.high)})"
        return text

    def latency(self, prefix: str, *, why: bool = False) -> str:
        """The cell "p50 / p99"; a refused one as "refused", or with its reason if ``why``."""
        p50, p99 = self.cell(f"{prefix}.p50"), self.cell(f"{prefix}.p99")
        if p50 == NOT_MEASURED and p99 == NOT_MEASURED:
            return NOT_MEASURED
        if "refused" in p50:
            return p50 if why else "refused"
        return f"{p50} / {p99}"


def _rows(cells: Iterable[Iterable[str]]) -> list[str]:
    return ["| " + " | ".join(row) + " |" for row in cells]


def _table(head: str, cells: Iterable[Iterable[str]]) -> list[str]:
    """A Markdown table: ``head`` is its header cells joined by " | "."""
    columns = head.count("|") + 1
    return [f"| {head} |", "|" + "---|" * columns, *_rows(cells)]


def _runs(sections: dict[str, dict[str, Any]], order: list[str]) -> list[str]:
    """One line per run the page draws on: command, start, sections, machine, load."""
    runs: dict[tuple[str, str], list[str]] = {}
    for name in order:
        if name in sections:
            part = sections[name]
            runs.setdefault((part["command"], part["started"][:13]), []).append(name)
    lines: list[str] = []
    busy: list[str] = []
    for (_, _), names in runs.items():
        first, last = sections[names[0]], sections[names[-1]]
        seconds = sum(sections[n]["seconds"] for n in names)
        about = first["machine"]
        busiest = max(float(sections[n]["machine"][w].split()[0]) for n in names
                      for w in ("load_before", "load_after"))  # fmt: skip
        if busiest > float(about["cores"]):
            busy.append(f"{busiest:.1f} on {about['cores']} cores")
        lines.append(
            f"- `{first['command']}`, started {first['started']}, {seconds:,.0f} s "
            f"({', '.join(names)}): {about['cores']} cores ({about['cpu']}), {about['kernel']}, "
            f"{about['python']}, SQLite {about['sqlite']}, PostgreSQL {about['postgresql']}; "
            f"load average {about['load_before']} before, {last['machine']['load_after']} after."
        )
    if busy:
        lines += [
            "",
            f"The machine was busy with other work (load average up to {', '.join(busy)}): "
            "every rate here is lower, and every latency higher, than on a quiet machine; "
            "the ratios to floors of the same run suffer least.",
        ]
    return lines


def _headline(page: Page) -> list[str]:
    def modes(row: str, one: str, batch: str, how: str) -> tuple[str, ...]:
        waits = f"latency.{row}"
        return (page.cell(one), page.latency(f"{waits}.item", why=True),
                page.cell(batch), page.latency(f"{waits}.batch", why=True), how)  # fmt: skip

    flags = "`--per-item` / `ackledger relay` (batches by default)"
    rows = [
        ("SQLite", "HTTP (`serve sink`)", *modes("sqlite.http", "relay.item_daemon",
         "relay.daemon", "`ackledger relay` / `--batch`")),
        ("SQLite", "RabbitMQ",
         *modes("sqlite.rabbit", "broker.sqlite.rabbit.item", "broker.sqlite.rabbit.default",
                flags)),
        ("SQLite", "NATS JetStream",
         *modes("sqlite.nats", "broker.sqlite.nats.item", "broker.sqlite.nats.default", flags)),
        ("PostgreSQL", "HTTP (`serve sink`)",
         *modes("pg.http", "pg.relay.item.1", "pg.relay.batch.1", "one relay, 64 partitions")),
        ("PostgreSQL", "RabbitMQ",
         *modes("pg.rabbit", "broker.ours.item", "broker.ours.default", flags)),
        ("PostgreSQL", "NATS JetStream",
         *modes("pg.nats", "broker.nats.item", "broker.nats.default", flags)),
    ]  # fmt: skip
    return [
        "Events per second from a durable outbox to a durable receiver, every event "
        "acknowledged before it is marked sent (median of the repetitions, the clock from the "
        "first mark to the last of a drain). p50 / p99 is what one event waits, in ms: from "
        "its publish (`created_at`, taken in its transaction just before the commit) to its "
        "mark as sent (`sent_at`, taken after the ACK or the broker's confirm), with one "
        f"`ackledger relay` running at its defaults while events are published one per "
        f"transaction at {latency.RATE:g}/s, far below every rate here. At its default "
        "`--poll-interval` of 0.5 s an idle relay on SQLite looks for new events twice a second, "
        "which is most of its wait (a smaller one shortens it); on PostgreSQL it wakes on the "
        "publish's NOTIFY. A row is refused unless every event was marked sent.",
        "",
        *_table(
            "outbox | to | one at a time, events/s | p50 / p99 ms | batched, events/s "
            "| p50 / p99 ms | how",
            rows,
        ),
        "",
        f"One batch at a time (`--inflight {INFLIGHT}`): RabbitMQ "
        f"{page.cell('broker.ours.onebatch')}/s, NATS {page.cell('broker.nats.onebatch')}/s. "
        f"More relays on PostgreSQL (batched): 2 relays {page.cell('pg.relay.batch.2')}/s, "
        f"4 relays {page.cell('pg.relay.batch.4')}/s.",
    ]


def _services(page: Page) -> list[str]:
    sink = [
        (str(c), page.cell(f"sink.c{c}.rps"), page.latency(f"sink.c{c}"),
         page.cell(f"pg.sink.c{c}.rps"), page.latency(f"pg.sink.c{c}"))
        for c in (1, 8, 32)
    ]  # fmt: skip
    return [
        "## The sink and the ledger under concurrent clients",
        "",
        "Keep-alive clients (`bench/load.py`, one connection each) posting for a fixed time. "
        "Every answer is checked: `/events` must answer 200 with the ACK of that very event, "
        "`/deliveries` 201 with a new delivery or 200 with the earlier one (`duplicate` "
        "true), as `application/json`. A workload with any other answer is refused.",
        "",
        "`POST /events` of one `ackledger serve sink` process, a new event each request:",
        "",
        *_table(
        "clients | SQLite events/s | p50 / p99 ms | PostgreSQL events/s | p50 / p99 ms",
        sink),
        "",
        "`POST /deliveries` of one `ackledger serve ledger` process, 16 clients, every other "
        "request a retry of the one before it:",
        "",
        *_table(
        "database | requests/s | p50 / p99 ms",
        [
            ("SQLite", page.cell("ledger.http.rps"), page.latency("ledger.http")),
            ("PostgreSQL", page.cell("pg.ledger.http.rps"), page.latency("pg.ledger.http")),
        ]),
    ]  # fmt: skip


def _ledger_peer(page: Page, results: Results) -> list[str]:
    peer = results.get("ledger.powertools")

    def against(key: str) -> str:
        value = results.get(key)
        return f"{value / peer:.2f} x" if value and peer else NOT_MEASURED

    rows = [
        ("Powertools `idempotent_function` + Redis", "ledger.powertools"),
        ("`Ledger.request`, synchronous=FULL", "ledger.full"),
        ("`Ledger.request`, synchronous=NORMAL", "ledger.normal"),
        ("bare sqlite3 loop, same statements, FULL", "ledger.raw_full"),
        ("bare sqlite3 loop, same statements, NORMAL", "ledger.raw_normal"),
    ]
    return [
        "## The ledger against Powertools + Redis",
        "",
        "In one process, the same requests (every other one a repeat of an earlier key) "
        "through ackledger's `Ledger` on SQLite and through Powertools for AWS Lambda's "
        "`idempotent_function` with its Redis persistence layer on the local Redis (which "
        "keeps nothing on disk). The bare loop runs the ledger's own statements with no "
        "ackledger Python: the most this schema allows here.",
        "",
        *_table(
            "who | requests/s (lowest to highest) | / Powertools",
            [(words, page.cell(key, spread=True), against(key)) for words, key in rows],
        ),
    ]


def _idempotent_peer(page: Page, results: Results) -> list[str]:
    ratio = dict(idempotent.ratios(results))
    rows = [("Powertools `idempotent_function` + Redis", page.cell(idempotent.PEER, spread=True),
             "1.00 x" if results.get(idempotent.PEER) else NOT_MEASURED)]  # fmt: skip
    rows += [
        (label, page.cell(key, spread=True),
         f"{ratio[label]:.2f} x" if label in ratio else NOT_MEASURED)
        for key, label in idempotent.OURS
    ]  # fmt: skip
    return [
        "## `@ledger.idempotent` against Powertools + Redis",
        "",
        "In one process, one run, the same calls (every other one a repeat of an earlier key) "
        "through the decorator and through Powertools' `@idempotent_function` with its Redis "
        "persistence layer on the local Redis (which keeps nothing on disk; `bench/idempotent.py`"
        "). A new key costs the decorator a claim and a durable result (on SQLite the claim "
        "skips the fsync: one fsync a key; on PostgreSQL two durable commits); "
        "with `using_arg` the key and the result are written in the caller's transaction and "
        "cost only the caller's one commit.",
        "",
        *_table("who | calls/s (lowest to highest) | / Powertools", rows),
    ]


def _broker_peer(page: Page, results: Results) -> list[str]:
    rows = [
        ("RabbitMQ floor: pika, confirms, window 1 / 16 / 256",
         " / ".join(page.cell(f"broker.floor.rabbit.w{w}") for w in (1, 16, 256))),
        ("faststream-outbox, defaults (not persistent)", page.cell("broker.peer.default")),
        ("faststream-outbox, best settings (persistent)", page.cell("broker.peer.best")),
        ("ours, `ackledger relay` (no flags: batches of 16, eight in flight)",
         page.cell("broker.ours.default")),
        ("ours, `ackledger relay --per-item` (one at a time)", page.cell("broker.ours.item")),
        (f"ours, `--inflight {INFLIGHT}` (one batch at a time)", page.cell("broker.ours.onebatch")),
        ("ours, `--pipeline`", page.cell("broker.ours.leased")),
        ("ours, `--single --pipeline`", page.cell("broker.ours.pipeline")),
        ("NATS floor: nats-py publish + PubAck, window 1 / 16 / 256",
         " / ".join(page.cell(f"broker.floor.nats.w{w}") for w in (1, 16, 256))),
    ]  # fmt: skip
    shown = [(label, value, goal) for label, value, goal in ratios(results) if value is not None]
    return [
        "## The relay against faststream-outbox",
        "",
        "A PostgreSQL outbox relayed into a durable RabbitMQ queue, each relay on a fresh "
        "database and queue (`bench/brokers`); the floors publish straight from pika and "
        "nats-py with the same confirms. Ours at its defaults is `ackledger relay` with no "
        "flags; faststream-outbox at its defaults publishes non-persistent messages. Ours at "
        "its best is the fastest of its batch runs, every one keeping every guarantee.",
        "",
        *_table("relay | events/s", rows),
        "",
        *_table(
            "ratio | measured | goal",
            [
                (label, f"{value:.2f} x", "—" if goal is None else f"≥ {goal:g}")
                for label, value, goal in shown
                if value is not None
            ],
        ),
        "",
        "Unroutable messages (RabbitMQ returned them): ours marked "
        f"{page.cell('broker.fact.return.ours.sent', whole=True)} of them sent and kept "
        f"{page.cell('broker.fact.return.ours.kept', whole=True)}; faststream-outbox deleted "
        f"{page.cell('broker.fact.return.peer.deleted', whole=True)} rows. Share of messages "
        f"read back as persistent: ours {page.cell('broker.fact.persistent.ours.default')}, "
        f"faststream-outbox at its defaults {page.cell('broker.fact.persistent.peer.default')}.",
    ]


def _floors(page: Page, results: Results) -> list[str]:
    floors = [
        ("fdatasync of a 4 KiB overwrite", "floor.fdatasync", "/s"),
        ("SQLite one-row commit, WAL, synchronous=FULL", "floor.commit_full", "/s"),
        ("SQLite one-row commit, WAL, synchronous=NORMAL", "floor.commit_normal", "/s"),
        ("keep-alive round trip from `http.client` to a raw socket server", "floor.http", "/s"),
        ("the same from a kept raw socket", "floor.http_raw", "/s"),
        ("per-item floor: 1 / (2 FULL commits + 1 `http.client` round trip)", "floor.relay",
         "/s"),
        ("zero-code hand-over: two processes, raw socket, a FULL commit on each side",
         "floor.handover", "/s"),
        ("raw round trip + FULL commit", "floor.step_new", "µs"),
        ("raw round trip + read by key", "floor.step_dup", "µs"),
    ]  # fmt: skip
    return [
        "## Floors and ratios",
        "",
        "What this machine allows, measured in the same run as the workloads "
        "(`bench/floors.py`): on a shared machine a workload divided by its floor travels "
        "between runs much better than its raw rate.",
        "",
        *_table(
            "floor | median (lowest to highest) | unit",
            [(words, page.cell(key, spread=True), unit) for words, key, unit in floors],
        ),
        "",
        *_ratio_table(RATIOS, results),
    ]


def _ratio_table(ratios: Iterable[Ratio], results: Results) -> list[str]:
    rows = []
    for ratio in ratios:
        value = ratio.value(results)
        goal = f"{'≥' if ratio.kind == 'at least' else '≤'} {ratio.goal:g}" if ratio.kind else "—"
        met = {True: "yes", False: "**no**", None: ""}[ratio.met(results)]
        shown = NOT_MEASURED if value is None else f"{value:.2f} x"
        rows.append((ratio.label, shown, goal, met))
    return _table("ratio | measured | goal | met", rows)


def _users_code(page: Page, results: Results) -> list[str]:
    rows = [
        ("hand-written pika + SQLAlchemy consumer (PostgreSQL, RabbitMQ), events/s",
         page.cell("consume.hand", spread=True)),
        ("`consume --session`, SQLAlchemy ORM handler, events/s",
         page.cell("consume.session", spread=True)),
        ("`consume --session` / hand-written, each round's own ratio",
         page.cell("consume.paired", spread=True)),
        ("AsyncSession (asyncpg), one plain row a transaction, /s",
         page.cell("publish_async.plain", spread=True)),
        ("the same + `publish_async(event, using=session)`, /s",
         page.cell("publish_async.ours", spread=True)),
        ("`serve sink` /events, 1 / 8 clients, events/s",
         f"{page.cell('user.sink.c1.rps')} / {page.cell('user.sink.c8.rps')}"),
        ("`Inbox.asgi()` in Starlette under uvicorn, 1 / 8 clients, events/s",
         f"{page.cell('user.asgi.c1.rps')} / {page.cell('user.asgi.c8.rps')}"),
        ("bare endpoint under uvicorn (one FULL commit), requests/s",
         page.cell("idem_mw.bare.rps", spread=True)),
        ("`IdempotencyMiddleware`, a replay each request, requests/s",
         page.cell("idem_mw.replay.rps", spread=True)),
        ("`IdempotencyMiddleware`, a new key each request, the middleware completes the key "
         "(default), requests/s", page.cell("idem_mw.first.rps", spread=True)),
        ("`IdempotencyMiddleware`, a new key each request, the endpoint completes the key in "
         "its own transaction, requests/s", page.cell("idem_mw.in_tx.rps", spread=True)),
        ("durable commits a request, counted by strace: the bare endpoint / a first request, "
         "default / a first request, the key completed in the endpoint's transaction",
         " / ".join(page.cell(f"idem_mw.syncs.{kind}") for kind in ("bare", "first", "in_tx"))),
        ("a first request's durable commits over the bare endpoint's, the middleware completes "
         "the key (default) (goal ≤ 1)", page.cell("idem_mw.extra_syncs")),
        ("a first request's durable commits over the bare endpoint's, the key completed in the "
         "endpoint's transaction (goal ≤ 1)", page.cell("idem_mw.extra_syncs_in_tx")),
        ("a first request's extra time, the middleware completes the key (default), in one-row "
         "FULL commits", page.cell("idem_mw.extra", spread=True)),
        ("a first request's extra time, the key completed in the endpoint's transaction, in "
         "one-row FULL commits", page.cell("idem_mw.extra_in_tx", spread=True)),
    ]  # fmt: skip
    return [
        "## The user's own code",
        "",
        "ackledger running the user's code against what the user would write or run without "
        "it, in one run: an ORM handler under `consume --session` against a hand-written "
        "consumer with the same guarantees and prefetch (`bench/ormconsume.py`; the two run "
        "back to back in each round, each first in turn, and the ratio is the median of the "
        "rounds' own ratios); "
        "`publish_async` in the user's `AsyncSession` against the same session's plain row "
        "(`bench/asyncpublish.py`; a run counts only if every transaction left its row, and "
        "ours its event); `Inbox.asgi()` mounted in a Starlette app under uvicorn "
        "against `serve sink` on the same SQLite files (`bench/asgiload.py`); and "
        "`IdempotencyMiddleware` with its ledger on SQLite in front of an endpoint whose "
        "effect is one one-row FULL commit, against the bare endpoint, one client "
        "(`bench/idemmiddleware.py`; a replay counts only if the endpoint did not run again). "
        "By default the middleware completes the key in a durable commit of its own after the "
        "endpoint's; an endpoint that completes it in its own transaction (its row and the key "
        "in one FULL commit on the ledger's file, the mode in which the effect is never "
        "committed without its key) leaves the middleware only the claim, which commits "
        "without an fsync. The durable commits are counted by strace attached to each server "
        "(WAL syncs, less each checkpoint's); the extra time is told in this machine's "
        "one-row FULL commits, measured in the same folder, and beside a count of none more "
        "it is time not spent waiting for the disk (the claim is made on the middleware's "
        "worker thread).",
        "",
        *_table("workload | median (lowest to highest)", rows),
        "",
        *_ratio_table(USER_RATIOS, results),
    ]


def _more(page: Page) -> list[str]:
    rows = [
        ("`Outbox.accept`, synchronous=FULL / NORMAL, events/s",
         f"{page.cell('accept.full')} / {page.cell('accept.normal')}"),
        ("per-item relay in process (`dispatch` + `send_http`), events/s",
         page.cell("relay.item")),
        ("per-item relay, marks behind the next send, events/s", page.cell("relay.item_behind")),
        ("batch relay in process (`dispatch_batch` + `send_http_batch`), events/s",
         page.cell("relay.batch")),
        ("`ackledger relay --batch --pipeline`, events/s", page.cell("relay.daemon_pipeline")),
        ("a new event through `serve sink`, one at a time, µs", page.cell("step.sink_new")),
        ("a duplicate through `serve sink`, µs", page.cell("step.sink_dup")),
        ("sink CPU per request, 1 / 8 / 32 clients, µs",
         " / ".join(page.cell(f"sink.c{c}.cpu") for c in (1, 8, 32))),
        ("`pending(16)` with 10,000 / 100,000 sent rows, µs",
         f"{page.cell('growth.pending.10000')} / {page.cell('growth.pending.100000')}"),
        ("relay peak RSS with 10,000 / 100,000 sent rows, MiB",
         f"{page.cell('growth.rss.10000')} / {page.cell('growth.rss.100000')}"),
        ("partition drills on PostgreSQL (ordering, kill -9, pause), s",
         page.cell("drills.partitions")),
    ]  # fmt: skip
    return [
        "## More from the same run",
        "",
        *_table("workload | median", rows),
        "",
        "Every figure of the run, with each repetition, is in `docs/benchmarks.json`.",
    ]


def _method(plan: str, results: Results) -> list[str]:
    lines = [
        "## Method",
        "",
        "- Each workload runs several times (3 in a quick run, 7 in a full one; the PostgreSQL "
        "section a third of that) and the page shows the median; tables with a range show "
        "the lowest and highest repetition.",
        "- Relays drain a pre-filled outbox into a real receiver process (`ackledger serve "
        "sink`, a RabbitMQ queue, a JetStream stream), both sides durable (SQLite "
        "synchronous=FULL, PostgreSQL defaults, persistent messages with publisher "
        "confirms); the clock runs from the first mark to the last.",
        "- Ratios divide by a floor or a peer measured in the same run on the same machine "
        "(the divisor is named in each row); a goal is what the ratio must reach.",
        "- Services are measured with `bench/load.py`: a figure counts only if every request "
        "got the answer its route promises.",
        "- The machine is shared: the load averages in the run line say how busy it was.",
    ]
    if plan == "quick":
        lines.append("- Quick run: workloads are small, so single runs swing more.")
    if results.skipped:
        lines += ["", "Skipped:", ""]
        lines += [f"- {section}: {reason}" for section, reason in results.skipped.items()]
    if results.refused:
        lines += ["", "Refused (answers not as expected):", ""]
        lines += [f"- {r['label']}: {r['why']}" for r in results.refused.values()]
    return lines


#: At most this many moved figures are listed; the rest are counted (the page stays short).
MOVED_ROWS = 40


def _value(value: float, unit: str) -> str:
    return f"{_num(value)} {unit}"


def _against(against: dict[str, Any]) -> list[str]:
    rev = f"`{against['rev']}`"
    comparison = moved.Comparison.from_dict(against["comparison"])
    worse = sorted(comparison.worse(), key=lambda pair: abs(math.log(pair.ratio or 1e-9)),
                   reverse=True)  # fmt: skip
    about = against["machine"]
    lines = [
        f"## Against {against['rev']}",
        "",
        f"`{against['command']}`, started {against['started']}, {against['seconds']:,.0f} s: "
        f"the sections both trees have ({', '.join(against['sections']) or 'none'}), each "
        f"measured by {rev}'s own suite and by this one right after the other, the first "
        f"turning every section; load average {about['load_before']} before, "
        f"{about['load_after']} after, on {about['cores']} cores. "
        f"{len(comparison.pairs)} figures compared; {len(comparison.only_theirs)} only in "
        f"{rev} and {len(comparison.only_ours)} only here (renamed or new), not compared.",
    ]
    if against["sections_only_ours"]:
        lines[-1] += f" Sections {rev} does not have: {', '.join(against['sections_only_ours'])}."
    lines.append("")
    if worse:
        lines += [
            f"Moved more than {moved.THRESHOLD:.0%} for the worse (a rate lower, a time or a "
            "size higher; ratio = here / there):",
            "",
            *_table(
                f"figure | {rev} | here | ratio",
                [(f"`{p.key}`", _value(p.theirs, p.unit), _value(p.ours, p.unit),
                  f"{p.ratio:.2f} x") for p in worse[:MOVED_ROWS]],
            ),
        ]  # fmt: skip
        if len(worse) > MOVED_ROWS:
            lines += ["", f"And {len(worse) - MOVED_ROWS} more (`docs/benchmarks.json`)."]
        if any(pair.key.startswith("floor.") for pair in worse):
            lines += [
                "",
                "A `floor.` figure runs no ackledger code (`bench/floors.py`): its move is the "
                "machine's between the two runs, and a measure of their noise.",
            ]
    else:
        lines.append(f"No figure moved more than {moved.THRESHOLD:.0%} for the worse.")
    facts = [f"`{p.key}` {_num(p.theirs)} there, {_num(p.ours)} here"
             for p in comparison.changed_facts()]  # fmt: skip
    failed = [f"{what} ({why})" for what, why in against["failed"].items()]
    wrong = against.get("refused_theirs", {})
    for head, items in (
        ("Counts and shares that differ", facts),
        (f"Refused in {rev}, whose suite counted them although its service did not answer "
         "as the workload expects", [f"`{k}` ({why})" for k, why in wrong.items()]),
        ("Refused or not measured in one of the two",
         [f"`{k}`" for k in comparison.unmeasured if k not in wrong]),
        ("Failed", failed),
    ):  # fmt: skip
        if items:
            lines += ["", f"{head}: {'; '.join(items)}."]
    return lines


def render(
    sections: dict[str, dict[str, Any]], order: list[str], against: dict[str, Any] | None = None
) -> str:
    results = store.combined(sections, order)
    page = Page(results)
    plans = {part["plan"] for part in sections.values()}
    plan = "quick" if "quick" in plans else "full"
    kind = (
        "**This is a quick run** (`make bench-quick`): small workloads, fewer repetitions. "
        "A full run (`make bench`) replaces it."
        if plan == "quick"
        else "A full run (`make bench`)."
    )
    lines = [
        "# Benchmarks",
        "",
        "Written by `python -m bench` from `docs/benchmarks.json`; do not edit by hand. " + kind,
        "",
        *_runs(sections, order),
        "",
        "## What to expect",
        "",
        *_headline(page),
        "",
        *_services(page),
        "",
        *_ledger_peer(page, results),
        "",
        *_idempotent_peer(page, results),
        "",
        *_broker_peer(page, results),
        "",
        *_users_code(page, results),
        "",
        *_floors(page, results),
        "",
        *_more(page),
        "",
        *([*_against(against), ""] if against else []),
        *_method(plan, results),
    ]
    return "\n".join(lines).rstrip() + "\n"


def write(
    sections: dict[str, dict[str, Any]], order: list[str], against: dict[str, Any] | None = None
) -> Path:
    out = store.DOCS / "benchmarks.md"
    out.write_text(render(sections, order, against), encoding="utf-8")
    return out
