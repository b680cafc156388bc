"""How an idle relay waits: until the poll interval is over, a stop is requested, or (on
PostgreSQL) a committed publish notifies it.

Polling stays the source of truth. The notification only shortens a wait: a wait that was
not woken ends at the poll interval as before, and a broken listening connection is dropped
(the wait goes on as a plain sleep) and opened again at the next wait, which then ends at once,
because events published while nobody listened sent their notification to nobody.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

from ..store.base import Backend, Listener

#: How often a wait looks at the stop flag (as the relay's other waits do).
WAIT_SLICE = 0.05
#: After a listener could not be opened, waits poll for this long before trying again (a
#: server at its connection limit is not asked, and the log not filled, every poll).
REOPEN_AFTER_S = 30.0


class StopWait(Protocol):
    def is_set(self) -> bool: ...

    def wait(self, timeout: float) -> bool: ...


Note = Callable[[int, str, str], None]


class IdleWait:
    """The relay's wait when nothing is pending. ``listen=False`` (or a backend without
    notifications, SQLite) makes it the plain poll."""

    def __init__(self, backend: Backend, stop: StopWait, *, listen: bool, note: Note) -> None:
        self._backend = backend
        self._stop = stop
        self._note = note
        self._wanted = listen
        self._listener: Listener | None = None
        self._reopen_at = 0.0
        #: Notifications that ended a wait early (tests read it).
        self.woken = 0

    def start(self) -> None:
        """Listen before the first look at the outbox, so nothing published after it is
        missed."""
        if self._wanted:
            self._open()

    def wait(self, seconds: float) -> None:
        reopen = self._listener is None and self._wanted and time.monotonic() >= self._reopen_at
        if reopen and self._open():
            return  # listening again: what was published meanwhile woke nobody, so look now
        listener = self._listener
        if listener is None:
            self._stop.wait(seconds)
            return
        deadline = time.monotonic() + seconds
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                if listener.wait(min(left, WAIT_SLICE)):
                    self.woken += 1
                    return
            except Exception as exc:  # the driver's error for a broken connection
                self._drop(exc)
                self._stop.wait(max(0.0, deadline - time.monotonic()))
                return

    def _open(self) -> bool:
        try:
            self._listener = self._backend.published_listener()
        except Exception as exc:
            self._note(logging.WARNING, "listen-failed", f"not listening ({exc}); polling")
            self._listener = None
            self._reopen_at = time.monotonic() + REOPEN_AFTER_S
            return False
        if self._listener is None:
            self._wanted = False  # this database cannot notify: poll, and never ask again
            return False
        return True

    def _drop(self, exc: Exception) -> None:
        listener, self._listener = self._listener, None
        self._note(logging.WARNING, "listen-lost", f"listening connection lost ({exc}); polling")
        if listener is not None:
            with contextlib.suppress(Exception):  # already broken: nothing more to release
                listener.close()

    def close(self) -> None:
        if self._listener is not None:
            listener, self._listener = self._listener, None
            listener.close()
