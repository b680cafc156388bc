"""PostgreSQL's wake-up for idle relays: ``publish`` NOTIFYs in its own transaction, a relay
LISTENs on a connection of its own.

A notification is delivered only when the transaction that sent it commits, so a rolled-back
publish wakes nobody; a transaction that publishes many events sends one (PostgreSQL folds
identical notifications of one transaction). The relay keeps polling: a notification lost to a
cut connection costs at most one poll interval, never an event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

#: The channel of the outbox's "an event was published" notification (per database).
CHANNEL = "ackledger_outbox"
LISTEN_PUBLISHED = f"LISTEN {CHANNEL}"
#: The listening connection's name in pg_stat_activity (operators, and tests that cut it).
APPLICATION_NAME = "ackledger-listen"


class PublishedListener:
    """One autocommit connection that LISTENs on ``CHANNEL``; ``wait`` blocks until a
    notification or the time-out. Not thread-safe: one relay loop owns it."""

    def __init__(self, url: str, connect_kwargs: dict[str, Any]) -> None:
        import psycopg

        kwargs = {**connect_kwargs, "autocommit": True, "application_name": APPLICATION_NAME}
        self._conn: psycopg.Connection[Any] = psycopg.connect(url, **kwargs)
        try:
            self._conn.execute(LISTEN_PUBLISHED)
        except BaseException:
            self._conn.close()
            raise

    def wait(self, timeout: float) -> bool:
        """True once a notification came (those queued behind it are taken too), False after
        ``timeout`` seconds without one. Raises psycopg.Error when the connection broke."""
        woken = False
        for _ in self._conn.notifies(timeout=timeout, stop_after=1):
            woken = True
        if woken:
            # Many publishes while the relay was busy are one reason to look, not many.
            for _ in self._conn.notifies(timeout=0):
                pass
        return woken

    def close(self) -> None:
        self._conn.close()
