"""Writing a run down: docs/benchmarks.md, docs/benchmarks.json and the plots in docs/img/."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .brokers import docs as brokers_docs
from .common import Figure, Plan, Results

DOCS = Path(__file__).resolve().parent.parent / "docs"
CHANGES = Path(__file__).with_name("CHANGES.md")


@dataclass(frozen=True)
class Target:
    label: str
    value: float | None
    goal: float
    #: "ratio" (value / goal must be >= 1), "ceiling" (value must be <= goal), or "info"
    #: (a ratio shown for what it says, with no goal: ``information``).
    kind: str
    unit: str

    @property
    def met(self) -> bool | None:
        if self.value is None or math.isnan(self.value) or self.kind == "info":
            return None
        return self.value >= self.goal if self.kind == "ratio" else self.value <= self.goal


def _ratio(results: Results, top: str, bottom: str) -> float | None:
    a, b = results.get(top), results.get(bottom)
    return a / b if a is not None and b else None


def targets(results: Results, plan: Plan) -> list[Target]:
    rows = plan.growth_rows
    first, last = f"{rows[0]}", f"{rows[-1]}"
    return [
        Target("per-item relay / floor 1/(2 commits + 1 round trip)",
               _ratio(results, "relay.item", "floor.relay"), 0.8, "ratio", "x"),
        Target("per-item relay / zero-code hand-over floor (same steps, raw sockets and SQLite)",
               _ratio(results, "relay.item", "floor.handover"), 0.7, "ratio", "x"),
        # The same goal against the floor measured right around each per-item run: on a
        # shared machine the floors section's figure is minutes away from the relay's.
        Target("per-item relay / zero-code hand-over floor measured around each run",
               results.get("relay.item_handover"), 0.7, "ratio", "x"),
        # Each mark still its own durable commit, committed behind the next send (issue 18).
        Target("per-item relay, marks behind (dispatch behind=...) / zero-code hand-over "
               "floor measured around each run",
               results.get("relay.item_behind_handover"), 0.7, "ratio", "x"),
        Target("`ackledger relay --pipeline` (per item) / zero-code hand-over floor measured "
               "around each run",
               results.get("relay.item_daemon_pipeline_handover"), 0.7, "ratio", "x"),
        # And against that floor with its two processes on one CPU: unpinned, the floor swings
        # with where the scheduler puts them (bench/CHANGES.md item 61).
        Target("per-item relay / zero-code hand-over floor on one CPU, right after each run",
               _ratio(results, "relay.item", "relay.item_floor_together"), 0.7, "ratio", "x"),
        Target("a new event through serve sink / (raw round trip + FULL commit)",
               _ratio(results, "step.sink_new", "floor.step_new"), 1.5, "ceiling", "x"),
        Target("a duplicate through serve sink / (raw round trip + read by key)",
               _ratio(results, "step.sink_dup", "floor.step_dup"), 1.5, "ceiling", "x"),
        Target("the relay's own step / one FULL commit",
               _ratio(results, "step.relay_own", "floor.step_commit"), 1.5, "ceiling", "x"),
        Target("per-item relay, one mark fsync per call (mark_sync='last') / floor "
               "1/(2 commits + 1 round trip)",
               _ratio(results, "relay.item_last", "floor.relay"), 0.8, "ratio", "x"),
        Target("batch relay / per-item relay", _ratio(results, "relay.batch", "relay.item"),
               10.0, "ratio", "x"),
        Target("batch relay events/s (goal, durable)", results.get("relay.batch"), 20_000,
               "ratio", "/s"),
        Target("`ackledger relay --batch` events/s (goal, durable)", results.get("relay.daemon"),
               20_000, "ratio", "/s"),
        Target("`ackledger relay --batch --pipeline` events/s (goal, durable)",
               results.get("relay.daemon_pipeline"), 20_000, "ratio", "/s"),
        Target("ledger FULL / Powertools+Redis",
               _ratio(results, "ledger.full", "ledger.powertools"), 2.0, "ratio", "x"),
        Target("ledger NORMAL / Powertools+Redis",
               _ratio(results, "ledger.normal", "ledger.powertools"), 10.0, "ratio", "x"),
        Target("ledger over HTTP, 16 clients, requests/s", results.get("ledger.http.rps"), 3_000,
               "ratio", "/s"),
        Target("ledger over HTTP, 16 clients, p99", results.get("ledger.http.p99"), 10.0,
               "ceiling", "ms"),
        Target(f"pending() latency, {int(last):,} / {int(first):,} sent rows",
               _ratio(results, f"growth.pending.{last}", f"growth.pending.{first}"), 1.5,
               "ceiling", "x"),
        Target(f"relay RSS, {int(last):,} / {int(first):,} sent rows",
               _ratio(results, f"growth.rss.{last}", f"growth.rss.{first}"), 1.1, "ceiling", "x"),
    ]  # fmt: skip


def information(results: Results) -> list[Target]:
    """Ratios against the guarded floors (bench/CHANGES.md item 82), shown without a goal:
    the issue's goals are set against the zero-code floors, and these split the gap to them
    into the contract's own work (guarded / zero-code) and ackledger's cost beyond it (ours /
    guarded), which is what is left to cut. The guarded loop sink (item 101) splits the sink's
    gap in two: the service's duties (an event loop, the limits, pipelining, group commit) in
    the least Python (loop / guarded), then ackledger's own code (ours / loop)."""
    sink, guarded = ("step.sink", "serve sink"), ("floor.guarded", "the guarded sink")
    loop = ("floor.guarded_loop", "the guarded loop sink")
    return [
        Target("guarded hand-over / zero-code hand-over (what the contract's work costs)",
               _ratio(results, "floor.handover_guarded", "floor.handover"), 0, "info", "x"),
        Target("per-item relay / guarded hand-over floor (ackledger beyond the contract's work)",
               _ratio(results, "relay.item", "floor.handover_guarded"), 0, "info", "x"),
        # The guarded relay sends the stored text as it is, as the relay's own sender does;
        # dispatch + send_http also deep-copies the event for the callback and validates it
        # again (CONTRACT sections 4 and 5), so both are shown.
        Target("per-item relay, own sender / guarded hand-over floor",
               _ratio(results, "relay.item_own", "floor.handover_guarded"), 0, "info", "x"),
        Target("per-item relay daemon (`ackledger relay`) / guarded hand-over floor",
               _ratio(results, "relay.item_daemon", "floor.handover_guarded"), 0, "info", "x"),
        Target("zero-code hand-over, marks behind / zero-code hand-over",
               _ratio(results, "floor.handover_behind", "floor.handover"), 0, "info", "x"),
        *_per_event(results, sink, guarded),
        *_per_event(results, sink, loop),
        *_per_event(results, loop, guarded),
    ]  # fmt: skip


def _per_event(results: Results, ours: tuple[str, str], floor: tuple[str, str]) -> list[Target]:
    """A sink's time and its CPU per new event and per duplicate against a floor's, each
    (key prefix, words): e.g. ("step.sink", "serve sink")."""
    (ours_key, ours_words), (floor_key, floor_words) = ours, floor
    kinds = (("new", "a new event", "new event"), ("dup", "a duplicate", "duplicate"))
    return [
        *(Target(f"{words} through {ours_words} / {floor_words}'s {noun}",
                 _ratio(results, f"{ours_key}_{kind}", f"{floor_key}_{kind}"), 0, "info", "x")
          for kind, words, noun in kinds),
        *(Target(f"{ours_words}'s CPU per {noun} / {floor_words}'s",
                 _ratio(results, f"{ours_key}_{kind}_sink_cpu", f"{floor_key}_{kind}_sink_cpu"),
                 0, "info", "x")
          for kind, _, noun in kinds),
    ]  # fmt: skip


def _num(value: float | None, unit: str = "") -> str:
    if value is None or math.isnan(value):
        return "—"
    if unit in ("x",) or abs(value) < 10:
        text = f"{value:.2f}"
    elif abs(value) < 100:
        text = f"{value:.1f}"
    else:
        text = f"{value:,.0f}"
    return f"{text} {unit}".strip() if unit in ("x", "ms", "us", "MiB") else text


def _figure_row(figure: Figure) -> str:
    samples = ", ".join(_num(s) for s in figure.samples)
    return (
        f"| {figure.label} | **{_num(figure.median)}** {figure.unit} | {_num(figure.low)} - "
        f"{_num(figure.high)} | {figure.spread_pct():.0f}% | {samples} |"
    )


def _table(results: Results, prefix: str) -> list[str]:
    chosen = [f for f in results.figures.values() if f.key.startswith(prefix)]
    if not chosen:
        return ["(not measured in this run)", ""]
    lines = [
        "| figure | median | min - max | spread | repetitions |",
        "|---|---|---|---|---|",
        *(_figure_row(f) for f in chosen),
        "",
    ]
    return lines


def write(
    results: Results,
    plan: Plan,
    machine: dict[str, str],
    *,
    command: str,
    started: str,
    took: float,
) -> Path:
    DOCS.mkdir(exist_ok=True)
    images = plots(results, plan)
    lines: list[str] = [
        "# Benchmarks",
        "",
        f"Written by `{command}` on {started} ({plan.name} run, {took:.0f} s). Every run of "
        "`make bench` or `make bench-quick` rewrites this file, `docs/benchmarks.json` and the "
        "plots in `docs/img/`; the section on what was changed comes from `bench/CHANGES.md`.",
        "",
        "Every figure is the median of its repetitions (listed in its row: "
        f"{plan.reps} in this run, {max(1, plan.reps // 3)} for the PostgreSQL section, where a "
        "median of two is their mean), with the lowest and highest repetition and the spread "
        "((max - min) / median). The machine is shared, so each workload is also given as a ratio "
        "to a floor measured in the same run: the ratios travel between machines and runs much "
        "better than the raw rates.",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in machine.items()),
        "",
        "## Against the targets",
        "",
        "| what | measured | target | met |",
        "|---|---|---|---|",
    ]
    for target in targets(results, plan):
        sign = "≥" if target.kind == "ratio" else "≤"
        met = {True: "yes", False: "**no**", None: "not measured"}[target.met]
        lines.append(
            f"| {target.label} | {_num(target.value, target.unit)} | {sign} "
            f"{_num(target.goal, target.unit)} | {met} |"
        )
    for line in information(results):
        lines.append(f"| {line.label} | {_num(line.value, line.unit)} | — | (information) |")
    lines += ["", "![ratios against targets](img/targets.png)", ""]
    sections = [
        ("Floors", "floor.", "What the machine allows: a durable 4 KiB write, a one-row SQLite "
         "commit in WAL mode, and a keep-alive round trip to a raw socket server "
         "(`bench/rawserver.py`) from `http.client` and from a kept raw socket. The per-item "
         "relay floor is 1 / (2 commits with synchronous=FULL + 1 round trip), the sum of the "
         "parts measured one by one (with either client). The zero-code hand-over floor does "
         "those same three steps for real in two processes with no ackledger code and no HTTP "
         "library: a kept raw socket posts to the raw server, which makes a one-row FULL "
         "commit with bare `sqlite3` before it answers, and the client then makes its own "
         "one-row FULL commit, in a loop; it is the per-item relay's floor (issue 18). The "
         "same hand-over with `http.client` as the client is shown beside it, and with each "
         "mark committed on a second thread while the next event travels (\"marks behind\", "
         "the floor of a relay that pipelines its marks). The guarded hand-over "
         "(`bench/guarded_relay.py`, `bench/guarded_sink.py`) is the same two processes and "
         "kept raw socket doing, in the most direct Python and still with no ackledger code, "
         "the work the CONTRACT requires of each side for one lab event: the relay selects "
         "pending rows in order from a real outbox, POSTs the stored text as "
         "`application/cloudevents+json`, checks the answer's framing and that its JSON is "
         "the ACK of this id and source, and marks the row in a FULL commit; the sink checks "
         "method, path, Host, content type and length, parses and validates the event, "
         "fingerprints its canonical content, and in one FULL transaction claims the receipt, "
         "adds the stock and counts it (a duplicate: a read by key and its count committed "
         "without an fsync), then answers the ACK. `floor.guarded_new`/`_dup` are one round "
         "trip to that sink with a new event and a duplicate; `floor.guarded_loop_new`/`_dup` "
         "the same to the guarded loop sink (`bench/guarded_loop_sink.py`), which keeps those "
         "rules with a service's duties: one uvloop event loop serving many clients through "
         "httptools, the limits of `ackledger.web.limits` (431, 413, 503, the read and idle "
         "time-outs), pipelining and group commit (item 101). Each hand-over row has both "
         "processes' CPU per event (`_relay_cpu`/`_client_cpu`, `_sink_cpu`; "
         "bench/CHANGES.md item 82). `python -m bench.layers` splits the CPU per event of "
         "ackledger's per-item path and of both hand-overs by layer (the kernel's database "
         "and socket system calls, SQLite, the interpreter, C extensions) under perf "
         "(item 86).", None),
        ("Accept", "accept.", "`Outbox.accept` in a loop: order row and outbox row in one "
         "transaction per event.", None),
        ("Relay end to end", "relay.", "A pre-filled outbox (synchronous=FULL) relayed into a "
         "real `ackledger serve sink` process (synchronous=FULL), from the first dispatch to the "
         "last mark. Per item: `dispatch` + `send_http` to `/events`, every mark fsynced (the "
         "default), and again with `mark_sync='last'` (each mark committed as it is earned, "
         "one fsync per call of up to 16 events; the sink still fsyncs every event before "
         "it answers); batch: `dispatch_batch` + `send_http_batch` to `/events/batch`, 16 "
         "events a request. The relay's HTTP client is ackledger's own (`wire/http.py`); "
         "the floors' round trip uses `http.client`, as the issue defines it.", "relay.png"),
        ("One event at a time, step by step", "step.", "Each step of the per-item relay "
         "beside its floor from the same run (`bench/steps.py`): the relay's own step "
         "(`dispatch` over a FULL outbox with a `send` that returns True at once: the "
         "`pending` read amortised over its selection and the mark's commit) beside one FULL "
         "commit; `send_http` to `serve sink` with a new event beside a raw round trip plus a "
         "FULL commit; the same events again (duplicates) beside a raw round trip plus a read "
         "by key (`floor.read_key`). In microseconds per event, wall clock and CPU time (the "
         "sender's `time.process_time`, the sink's from `/proc`): on a shared machine the CPU "
         "time is the steadier figure.", None),
        ("The sink under concurrent clients", "sink.", "Keep-alive clients (`bench/load.py`, "
         "asyncio, one connection each) posting new events to `/events` of one sink process "
         "(synchronous=FULL) for a fixed time.", "sink_concurrency.png"),
        ("Growth", "growth.", "An outbox with "
         + ", ".join(f"{rows:,}" for rows in plan.growth_rows)
         + " rows already sent (written by the bench-only bulk insert in `bench/fill.py`; the "
         "quick run stops at 100,000, the full run adds 1,000,000) plus 2,000 pending: latency "
         "of `pending(16)` and the peak RSS of a relay draining the pending events.",
         "growth.png"),
        ("Ledger in process, against Powertools for AWS Lambda", "ledger.",
         f"{plan.ledger_requests:,} requests, every other one a repeat of an earlier key. Peer: "
         "`idempotent_function` with `RedisCachePersistenceLayer` (ssl=False) on the local Redis, "
         "which keeps nothing on disk. The bare sqlite3 loop runs the very statements of "
         "`Ledger.request` on a database ackledger created (same schema, indexes and trigger) "
         "with none of our Python: it is what this schema can do on this machine, so ours / "
         "bare loop is the share our code costs and bare loop / peer the most any Python "
         "ledger of this shape could reach (see the notes from the run). Ledger over HTTP: "
         "`ackledger serve ledger`, 16 keep-alive clients posting to `/deliveries`.", "ledger.png"),
        ("PostgreSQL", "pg.", "All on the local PostgreSQL server (a fresh database per "
         "workload). Relays: N `ackledger relay` processes, each one of N leasing partitions, "
         "drain an outbox of events over 64 partitions into one `ackledger serve sink` process "
         "whose inbox is on PostgreSQL; the clock runs from the first mark to the last. This "
         "machine has 2 cores shared by PostgreSQL, the sink, the relays and the load client, "
         "so more relays cannot add throughput here: the rows show the cost of leases and "
         "PostgreSQL round trips, not how far it scales. Sink and ledger: the same clients as "
         "above against services whose database is PostgreSQL.", None),
    ]  # fmt: skip
    for title, prefix, text, image in sections:
        lines += [f"## {title}", "", text, "", *_table(results, prefix)]
        if image and image in images:
            lines += [f"![{title}](img/{image})", ""]
    if results.skipped:
        lines += ["## Skipped", ""]
        lines += [f"- {section}: {reason}" for section, reason in results.skipped.items()]
        lines.append("")
    if results.notes:
        lines += ["## Notes from the run", ""]
        lines += [f"- {note}" for note in results.notes]
        lines.append("")
    out = DOCS / "benchmarks.md"
    # The broker section and JSON key are bench/brokers' own: kept as they were.
    kept = brokers_docs.kept_section(out.read_text(encoding="utf-8")) if out.exists() else []
    if kept:
        lines += [*kept, ""]
    if CHANGES.exists():
        lines += [CHANGES.read_text(encoding="utf-8").rstrip(), ""]
    kept_brokers = brokers_docs.kept_json(DOCS / "benchmarks.json")
    out.write_text("\n".join(lines), encoding="utf-8")
    (DOCS / "benchmarks.json").write_text(
        json.dumps(
            {
                "command": command,
                "started": started,
                "plan": plan.name,
                "machine": machine,
                "figures": [f.as_dict() for f in results.figures.values()],
                "skipped": results.skipped,
                "notes": results.notes,
                **({"brokers": kept_brokers} if kept_brokers is not None else {}),
            },
            indent=1,
        ),
        encoding="utf-8",
    )
    return out


def plots(results: Results, plan: Plan) -> set[str]:
    """Draws what was measured; returns the file names written under docs/img/."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = DOCS / "img"
    folder.mkdir(parents=True, exist_ok=True)
    written: set[str] = set()

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(folder / name, dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.add(name)

    def bars(ax: Any, keys: list[tuple[str, str, str]]) -> None:
        """One bar per (figure key, label, colour) that was measured, with its min-max."""
        present = [(k, name, c) for k, name, c in keys if results.get(k) is not None]
        values = [results.figures[k].median for k, _, _ in present]
        errors = [
            [results.figures[k].median - results.figures[k].low for k, _, _ in present],
            [results.figures[k].high - results.figures[k].median for k, _, _ in present],
        ]
        names = [name for _, name, _ in present]
        colors = [c for _, _, c in present]
        ax.bar(names, values, yerr=errors, color=colors, capsize=4)
        for index, value in enumerate(values):
            ax.annotate(f"{value:,.0f}", (index, value), ha="center", va="bottom", fontsize=8)

    fig, ax = plt.subplots(figsize=(9, 4.5))
    bars(
        ax,
        [
            ("floor.commit_full", "commit\nFULL", "#999999"),
            ("floor.http", "HTTP\nround trip", "#999999"),
            ("floor.relay", "per-item\nfloor", "#555555"),
            ("floor.handover", "hand-over\nfloor", "#555555"),
            ("relay.item", "per-item\nrelay", "#1f77b4"),
            ("relay.item_last", "per-item\nsync=last", "#1f77b4"),
            ("relay.batch", "batch\nrelay", "#2ca02c"),
            ("relay.daemon", "relay\n--batch", "#17becf"),
            ("relay.daemon_pipeline", "--batch\n--pipeline", "#17becf"),
            ("accept.full", "accept\nFULL", "#ff7f0e"),
            ("accept.normal", "accept\nNORMAL", "#ff7f0e"),
        ],
    )
    ax.set_yscale("log")
    ax.set_ylabel("per second (log)")
    ax.set_title("Floors and relay workloads (medians, bars show min-max)")
    save(fig, "relay.png")

    counts = [c for c in (1, 8, 32) if results.get(f"sink.c{c}.rps") is not None]
    if counts:
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4))
        left.plot(counts, [results.get(f"sink.c{c}.rps") for c in counts], "o-")
        left.set_xscale("log", base=2)
        left.set_xlabel("concurrent clients")
        left.set_ylabel("requests/s")
        left.set_title("sink /events throughput")
        for pct in ("p50", "p99"):
            right.plot(counts, [results.get(f"sink.c{c}.{pct}") for c in counts], "o-", label=pct)
        right.set_xscale("log", base=2)
        right.set_xlabel("concurrent clients")
        right.set_ylabel("latency (ms)")
        right.legend()
        right.set_title("sink /events latency")
        save(fig, "sink_concurrency.png")

    rows = [r for r in plan.growth_rows if results.get(f"growth.pending.{r}") is not None]
    if rows:
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4))
        left.plot(rows, [results.get(f"growth.pending.{r}") for r in rows], "o-")
        left.set_xscale("log")
        left.set_ylim(bottom=0)
        left.set_xlabel("rows already sent")
        left.set_ylabel("pending(16) latency (µs)")
        right.plot(rows, [results.get(f"growth.rss.{r}") for r in rows], "o-", color="#d62728")
        right.set_xscale("log")
        right.set_ylim(bottom=0)
        right.set_xlabel("rows already sent")
        right.set_ylabel("relay peak RSS (MiB)")
        save(fig, "growth.png")

    if any(results.get(k) is not None for k in ("ledger.powertools", "ledger.full")):
        fig, ax = plt.subplots(figsize=(9, 4))
        bars(
            ax,
            [
                ("ledger.powertools", "Powertools\n+ Redis", "#999999"),
                ("ledger.full", "ours\nFULL", "#1f77b4"),
                ("ledger.raw_full", "bare loop\nFULL", "#555555"),
                ("ledger.normal", "ours\nNORMAL", "#2ca02c"),
                ("ledger.raw_normal", "bare loop\nNORMAL", "#555555"),
                ("ledger.http.rps", "ours over HTTP\n16 clients", "#9467bd"),
            ],
        )
        ax.set_ylabel("requests/s")
        ax.set_title(f"Ledger, {plan.ledger_requests:,} requests, half repeats")
        save(fig, "ledger.png")

    measured = [t for t in targets(results, plan) if t.met is not None and t.value is not None]
    if measured:
        fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * len(measured)))
        scores = [
            (t.value / t.goal) if t.kind == "ratio" else (t.goal / t.value if t.value else 0.0)
            for t in measured
            if t.value is not None
        ]
        colors = ["#2ca02c" if t.met else "#d62728" for t in measured]
        ax.barh([t.label for t in measured], scores, color=colors)
        ax.axvline(1.0, color="black", linewidth=1)
        ax.invert_yaxis()
        ax.set_xlabel("measured / target (1 = target met; for ceilings target / measured)")
        save(fig, "targets.png")
    return written
