"""``ackledger demo``: the main job, told with real processes on SQLite."""

from __future__ import annotations

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
    return 0 if ok else 1
