"""The broker benchmark's own part of docs/: a marked section of benchmarks.md, the
``brokers`` key of benchmarks.json and img/brokers.png.

The rest of those files belongs to ``bench/report.py``, which keeps this section and key as
they were when it rewrites them (``kept_section``, ``kept_json``), so either can run alone.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..common import Figure, Results
from . import INFLIGHT, RATIOS, ratios

DOCS = Path(__file__).resolve().parents[2] / "docs"
BEGIN = "<!-- brokers: begin (written by bench/brokers; edits here are lost) -->"
END = "<!-- brokers: end -->"
IMAGE = "brokers.png"

INTRO = (
    "PostgreSQL outbox -> RabbitMQ on this machine's servers, everything in one run and "
    "alternated per repetition (floors, ours per item, faststream-outbox at its defaults, ours "
    "`--batch`, faststream-outbox at its best), each run on a fresh database and a fresh "
    "durable classic queue. Ours: one `ackledger relay --source postgresql://... --to "
    "amqp://...?exchange=E&routing_key=Q` process (the partition relay, 64 partitions), timed "
    "from its first mark to its last. The peer: faststream-outbox 0.19 with "
    "`faststream[rabbit]` 0.7, SQLAlchemy async and asyncpg, in its own venv (`.venv-peer`, "
    "made by the first run), its documented relay (a RabbitMQ publisher stacked on an outbox "
    "subscriber), its table filled through `publish_batch`; timed from the first row deleted "
    "to the last, counted every 20 ms from another connection. Defaults: 1 worker, fetch 10, "
    "flush 1, `persist=False` (its publisher's default); best: 4 workers, fetch 500, flush "
    "500, `persist=True`. Also ours as `--batch --pipeline` (the partition relay, each "
    "batch's lease-checked marks committed on a second connection while the next batch is "
    "sent), `--batch --single --pipeline` (the same in the single loop, no leases) and "
    "`--batch --inflight 8` (the partition relay with up to eight batches published before "
    "the oldest one's confirms are awaited, each marked on its own confirms, in order). Floors: "
    "pika publishing "
    "persistent `mandatory` messages to a durable queue on a confirm channel, one at a time "
    "and in windows of 16 and 256; nats-py "
    "publishing to a file-backed stream and awaiting each PubAck, alone or in windows."
)


#: Written by hand from ``py-spy record --idle`` of one ``ackledger relay --batch`` process
#: (PostgreSQL -> RabbitMQ, 3,000 events) on the loaded machine, 2026-12-01; bench/CHANGES.md
#: item 20 has the commands.
WHERE_THE_TIME_GOES = (
    "Where our relay's time goes (py-spy `--idle`, the main thread of one `ackledger relay "
    "--batch` process, PostgreSQL -> RabbitMQ, 3,000 events, load average 5-8 on 2 cores). "
    "Before bench/CHANGES.md item 20: 55% in the marks (a lease-checked statement per event, "
    "then a commit), 18% waiting for RabbitMQ's confirms, 7% renewing the lease between "
    "rounds, 6% selecting, 8% claiming and releasing partitions, and no idle wait while "
    "events were pending (0 of 4,069 samples; an earlier reading of 23% came from the "
    "connection pool's idle threads). After: 23% in the marks (one statement per batch, the "
    "WAL flush of its commit is most of it), 37% waiting for the confirms, 12% reading "
    "(one read serves four selections), 12% claiming and releasing, 9% building and checking "
    "the messages. With marks inline, the commit of each batch's marks comes between two "
    "publishes; `--pipeline` overlaps it with the next batch's confirm wait."
)


def _num(value: float) -> str:
    if math.isnan(value):
        return "—"
    if abs(value) < 10:
        return f"{value:.2f}"
    return f"{value:,.0f}"


def _row(figure: Figure) -> str:
    samples = ", ".join(_num(s) for s in figure.samples)
    return f"| {figure.label} | **{_num(figure.median)}** {figure.unit} | {samples} |"


def section(results: Results, about: dict[str, str], *, command: str, started: str,
            took: float) -> list[str]:  # fmt: skip
    figures = [f for f in results.figures.values() if f.key.startswith("broker.")]
    timed = [f for f in figures if not f.key.startswith("broker.fact.")]
    facts = [f for f in figures if f.key.startswith("broker.fact.")]
    load = about.get("load_before", "?") + " before, " + about.get("load_after", "?") + " after"
    lines = [
        BEGIN,
        "## Relay to a broker: ours, faststream-outbox and the raw floors",
        "",
        f"Written by `{command}` on {started} ({took:.0f} s; load average {load}, on "
        f"{about.get('cores', '?')} cores shared with other work: absolute rates swing, the "
        "ratios measured in the same run are the figures to read).",
        "",
        INTRO,
        "",
        "| ratio | measured | goal |",
        "|---|---|---|",
    ]
    for label, value, goal in ratios(results):
        shown = "—" if value is None else f"{value:.2f}x"
        wanted = (
            ""
            if goal is None
            else f"≥ {goal:g}x "
            + ("(met)" if value is not None and value >= goal else "(**not met**)")
        )
        lines.append(f"| {label} | {shown} | {wanted} |")
    lines += ["", "| figure | median | repetitions |", "|---|---|---|"]
    lines += [_row(f) for f in timed] or ["| (not measured in this run) | | |"]
    lines += ["", f"![brokers](img/{IMAGE})", "", "Measured facts (same run):", ""]
    lines += ["| fact | value |", "|---|---|"]
    lines += [f"| {f.label} | {_num(f.median)} {f.unit} |" for f in facts]
    lines += ["", WHERE_THE_TIME_GOES]
    if "brokers.peer" in results.skipped:
        lines += ["", f"faststream-outbox was not measured: {results.skipped['brokers.peer']}"]
    lines += ["", END]
    return lines


def kept_section(text: str) -> list[str]:
    """The broker section of an existing benchmarks.md, or nothing."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        return []
    return text[start : end + len(END)].splitlines()


def kept_json(path: Path) -> Any:
    """The ``brokers`` key of an existing benchmarks.json, or None."""
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("brokers")
    except (OSError, ValueError, AttributeError):
        return None


def write(results: Results, about: dict[str, str], *, command: str, started: str,
          took: float) -> Path:  # fmt: skip
    out = DOCS / "benchmarks.md"
    text = out.read_text(encoding="utf-8") if out.exists() else "# Benchmarks\n"
    new = "\n".join(section(results, about, command=command, started=started, took=took))
    start, end = text.find(BEGIN), text.find(END)
    if start >= 0 and end > start:
        text = text[:start] + new + text[end + len(END) :]
    else:
        # Before the history of changes, if there is one: the figures come first.
        anchor = text.find("\n## What was changed in the product")
        at = anchor + 1 if anchor >= 0 else len(text)
        text = text[:at].rstrip("\n") + "\n\n" + new + "\n\n" + text[at:]
    out.write_text(text, encoding="utf-8")
    data_path = DOCS / "benchmarks.json"
    try:
        data = json.loads(data_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    data["brokers"] = {
        "command": command,
        "started": started,
        "machine": about,
        "figures": [f.as_dict() for f in results.figures.values() if f.key.startswith("broker.")],
        "ratios": [
            {"label": label, "value": value, "goal": goal} for label, value, goal in ratios(results)
        ],
        "skipped": {k: v for k, v in results.skipped.items() if k.startswith("brokers")},
        "notes": results.notes,
    }
    data_path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    plot(results)
    return out


def plot(results: Results) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = [
        ("broker.floor.rabbit.w1", "pika\nwindow 1", "#999999"),
        ("broker.floor.rabbit.w16", "pika\nwindow 16", "#777777"),
        ("broker.floor.rabbit.w256", "pika\nwindow 256", "#555555"),
        ("broker.peer.default", "faststream-\noutbox\ndefaults", "#ff7f0e"),
        ("broker.peer.best", "faststream-\noutbox\nbest", "#d62728"),
        ("broker.ours.item", "ours\nper item", "#1f77b4"),
        ("broker.ours.batch", "ours\n--batch", "#2ca02c"),
        ("broker.ours.inflight", f"ours --batch\n--inflight {INFLIGHT}", "#8c564b"),
        ("broker.ours.leased", "ours --batch\n--pipeline", "#bcbd22"),
        ("broker.ours.pipeline", "ours --batch\n--single\n--pipeline", "#98df8a"),
        ("broker.floor.nats.w1", "nats-py\nwindow 1", "#bbbbbb"),
        ("broker.floor.nats.w16", "nats-py\nwindow 16", "#888888"),
        ("broker.nats.item", "ours NATS\nper item", "#17becf"),
        ("broker.nats.batch", "ours NATS\n--batch", "#9467bd"),
        ("broker.nats.inflight", f"ours NATS\n--batch\n--inflight {INFLIGHT}", "#c5b0d5"),
    ]
    present = [(k, name, c) for k, name, c in bars if results.get(k) is not None]
    if not present:
        return
    fig, ax = plt.subplots(figsize=(11, 4.5))
    values = [results.figures[k].median for k, _, _ in present]
    errors = [
        [results.figures[k].median - results.figures[k].low for k, _, _ in present],
        [results.figures[k].high - results.figures[k].median for k, _, _ in present],
    ]
    ax.bar([n for _, n, _ in present], values, yerr=errors, capsize=4,
           color=[c for _, _, c in present])  # fmt: skip
    for index, value in enumerate(values):
        ax.annotate(f"{value:,.0f}", (index, value), ha="center", va="bottom", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("events (messages) per second, log")
    ax.set_title("PostgreSQL outbox -> RabbitMQ / NATS JetStream (medians, bars min-max)")
    ax.tick_params(axis="x", labelsize=8)
    folder = DOCS / "img"
    folder.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(folder / IMAGE, dpi=110, bbox_inches="tight")
    plt.close(fig)


__all__ = ["RATIOS", "kept_json", "kept_section", "write"]
