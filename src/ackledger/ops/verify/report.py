"""What ``verify`` prints: progress while it runs, then the table and the verdict.

On a terminal the progress is one bar redrawn in place on stderr; otherwise it is one plain
line per schedule, so that a CI log reads well. The table and the verdict go to stdout (or
one JSON object with ``--json``).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from .campaign import Outcome
from .judge import Counts

COLUMNS = ("schedules", "events", "kills", "lost", "double-applied", "stuck", "reordered")


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total, self.done, self.failed = total, 0, 0
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()

    def _bar(self, doing: str) -> None:
        width = 30
        filled = width * self.done // self.total
        bar = "#" * filled + "." * (width - filled)
        # Padded: a shorter line must cover the longer one it is drawn over.
        line = f"[{bar}] {self.done}/{self.total} schedules, {self.failed} failing{doing}"
        self.stream.write(f"\r{line:<72}")

    def schedule_started(self, seed: int) -> None:
        if self.tty:
            self._bar(f"; seed {seed} running")
            self.stream.flush()

    def schedule_done(self, outcome: Outcome) -> None:
        self.done += 1
        self.failed += not outcome.counts.clean
        if self.tty:
            self._bar("")
            if self.done == self.total:
                self.stream.write("\n")
        else:
            verdict = "ok" if outcome.counts.clean else "FAIL"
            verdict += "".join(f"; note: {note}" for note in outcome.notes)
            self.stream.write(
                f"verify: schedule {self.done}/{self.total} seed {outcome.schedule.seed} "
                f"({outcome.schedule.text()}): {verdict}\n"
            )
        self.stream.flush()


def totals(outcomes: Sequence[Outcome]) -> Counts:
    total = Counts()
    for outcome in outcomes:
        total.add(outcome.counts)
    return total


#: A URL's password (``scheme://user:password@``): never printed, the user gives it again.
_PASSWORD = re.compile(r"(://[^/:@]*):[^/@]*@")


def replay_command(argv: Sequence[str], seed: int) -> str:
    """The user's own command with ``--seed S --schedules 1``: it replays that schedule (a
    URL's password left out)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("--seed", "--schedules"):
            skip = "=" not in arg
            continue
        kept.append(_PASSWORD.sub(r"\1@", arg))
    return shlex.join(["ackledger", *kept, "--seed", str(seed), "--schedules", "1"])


def table(outcomes: Sequence[Outcome]) -> str:
    total = totals(outcomes)
    values = (len(outcomes), total.events, total.kills, total.lost, total.double_applied,
              total.stuck, total.reordered)  # fmt: skip
    widths = [max(len(name), len(str(value))) for name, value in zip(COLUMNS, values, strict=True)]
    head = "  ".join(name.rjust(w) for name, w in zip(COLUMNS, widths, strict=True))
    row = "  ".join(str(value).rjust(w) for value, w in zip(values, widths, strict=True))
    return f"{head}\n{row}"


def verdict(outcomes: Sequence[Outcome], argv: Sequence[str]) -> str:
    failing = [o for o in outcomes if not o.counts.clean]
    if not failing:
        return (
            f"VERDICT: PASS - {len(outcomes)} schedule{'s' if len(outcomes) != 1 else ''}: "
            "nothing lost, nothing applied twice, "
            "nothing stuck, no partition reordered."
        )
    lines = [f"VERDICT: FAIL - {len(failing)} of {len(outcomes)} schedules failed:"]
    for outcome in failing:
        c = outcome.counts
        found = ", ".join(
            f"{name} {value}"
            for name, value in (("lost", c.lost), ("double-applied", c.double_applied),
                                ("stuck", c.stuck), ("reordered", c.reordered))
            if value
        )  # fmt: skip
        lines.append(f"  seed {outcome.schedule.seed} ({outcome.schedule.text()}): {found}")
        for problem, ids in c.examples.items():
            lines.append(f"    {problem}: {', '.join(ids)}")
        for note in outcome.notes:
            lines.append(f"    note: {note}")
        if outcome.kept_logs is not None:
            lines.append(f"    logs: {outcome.kept_logs}")
        lines.append(f"    replay: {replay_command(argv, outcome.schedule.seed)}")
    return "\n".join(lines)


def as_json(outcomes: Sequence[Outcome], argv: Sequence[str]) -> str:
    total = totals(outcomes)
    failing: list[dict[str, Any]] = [
        {
            "seed": o.schedule.seed,
            "faults": [fault.text() for fault in o.schedule.faults],
            "lost": o.counts.lost,
            "double_applied": o.counts.double_applied,
            "stuck": o.counts.stuck,
            "reordered": o.counts.reordered,
            "examples": o.counts.examples,
            "notes": o.notes,
            "logs": None if o.kept_logs is None else str(o.kept_logs),
            "replay": replay_command(argv, o.schedule.seed),
        }
        for o in outcomes
        if not o.counts.clean
    ]
    return json.dumps(
        {
            "schedules": len(outcomes),
            "events": total.events,
            "kills": total.kills,
            "lost": total.lost,
            "double_applied": total.double_applied,
            "stuck": total.stuck,
            "reordered": total.reordered,
            "verdict": "fail" if failing else "pass",
            "failing": failing,
        }
    )
