"""Where the two processes of a hand-over run: on one CPU, or on two.

A hand-over between two processes costs a context switch when both sit on one CPU, and a
wake-up of the other CPU when they do not; on a VM whose idle vCPUs halt at once, that
wake-up is most of a minimal hand-over's time. Left to the scheduler, the pair lands either
way depending on what ran before, so an unpinned floor swings with it.
Linux only (``os.sched_setaffinity``); elsewhere nothing is pinned.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

#: How a pair is placed, and the words for the figures' labels.
PLACEMENTS = {"together": "on one CPU", "apart": "on two CPUs"}


@contextlib.contextmanager
def placed(how: str, pid: int) -> Iterator[bool]:
    """Pin this process and process ``pid`` on one CPU (``together``) or on two (``apart``)
    for the block, then give both their CPUs back; yields whether they were pinned."""
    if how not in PLACEMENTS:
        raise ValueError(f"how: must be one of {', '.join(PLACEMENTS)}, got {how!r}")
    setter = getattr(os, "sched_setaffinity", None)
    if setter is None:
        yield False
        return
    mine, theirs = os.sched_getaffinity(0), os.sched_getaffinity(pid)
    cpus = sorted(mine & theirs)
    if not cpus or (how == "apart" and len(cpus) < 2):
        yield False
        return
    setter(0, {cpus[0]})
    setter(pid, {cpus[0] if how == "together" else cpus[1]})
    try:
        yield True
    finally:
        setter(0, mine)
        with contextlib.suppress(ProcessLookupError):
            setter(pid, theirs)
