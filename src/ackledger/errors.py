"""The error hierarchy. Each class's docstring is its default message."""

from __future__ import annotations


class AckledgerError(Exception):
    """ackledger failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or "").strip())


class InvalidEvent(AckledgerError, ValueError):
    """The event or request is invalid."""

    def __init__(self, message: str | None = None, *, field: str | None = None) -> None:
        super().__init__(message)
        #: The name of the offending field, when one can be named.
        self.field = field


class Conflict(AckledgerError):
    """This id or key is already recorded with different content."""


class NotAcknowledged(AckledgerError):
    """The receiver did not answer with an exact acknowledgement."""

    def __init__(
        self,
        message: str | None = None,
        *,
        status: int | None = None,
        permanent: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        #: The HTTP status of the answer, when there was one (a 4xx says: do not retry).
        self.status = status
        #: The receiver said "never as it is" without an HTTP status (a broker's return of an
        #: unroutable message): a poison event, like a 4xx.
        self.permanent = permanent
        #: Seconds a 429 or 503 answer asked to wait (its ``Retry-After``), or None.
        self.retry_after = retry_after


class UnsafeTarget(AckledgerError, ValueError):
    """The URL is not an allowed target; no connection was made."""


class LeaseLost(AckledgerError):
    """The partition lease expired or was taken over; this relay may no longer mark it."""


class NoHandler(AckledgerError):
    """The inbox has no handler for this event's type."""


class Rejected(AckledgerError):
    """A handler refused the event: it can never be applied (permanent, not retried)."""


class InFlight(AckledgerError):
    """This key is held by a call or request that may still be running; retry later."""

    def __init__(self, message: str | None = None, *, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self._retry_after = retry_after

    @property
    def retry_after(self) -> float:
        """Seconds until the holder's claim could be taken over, if it has not finished."""
        return self._retry_after
