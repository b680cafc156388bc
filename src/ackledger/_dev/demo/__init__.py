"""``ackledger demo``: the main job, told with real processes on SQLite."""

from __future__ import annotations

import shlex
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from . import any_event, ledger, pipeline
from .story import Story

Chapter = Callable[[Story, Path], None]

CHAPTERS: tuple[Chapter, ...] = (
    pipeline.crash_after_ack,
    pipeline.response_lost,
    any_event.any_event,
    ledger.job_reruns,
)


def run(*, keep: bool = False) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="ackledger-demo-"))
    story = Story()
    print("ackledger demo - retry freely, apply once")
    print(f"working in {workdir} (real SQLite files, real processes on 127.0.0.1)")
    try:
        for chapter in CHAPTERS:
            try:
                chapter(story, workdir)
            except Exception as exc:
                story.check(f"{chapter.__name__} ran to its end", False, repr(exc))
        ok = story.verdict()
    finally:
        if keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    if keep:
        print("See what the story left behind in the operator's page (Ctrl-C stops it):")
        print(console_command(workdir))
    else:
        print("`ackledger demo --keep` keeps its databases, to open them in `ackledger console`.")
    return 0 if ok else 1


def console_command(workdir: Path) -> str:
    """The line that opens the console on the demo's databases: the first chapter's outbox
    and sink, and the ledger's chapter's ledger."""
    names = {"source": "source.db", "sink": "sink.db", "ledger": "ledger.db"}
    flags = " ".join(f"--{flag} {shlex.quote(str(workdir / name))}" for flag, name in names.items())
    return f"ackledger console {flags}"
