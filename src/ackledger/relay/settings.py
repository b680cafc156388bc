"""What one relay is told: where to send, how, and how to wait; checked once, up front.

The same settings drive the single loop (the whole outbox) and a relay that is one of N
(``owner`` set: it leases partitions of the outbox, see docs/postgres.md).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .._core.backoff import Backoff
from .._core.exact import is_number
from ..source.inflight import check_inflight
from ..source.marking import check_mark_sync
from ..source.outbox import MAX_BATCH, check_limit
from ..wire.ack import check_ack
from ..wire.sender import check_url, is_broker
from ..wire.targets import check_timeout
from ..wire.token import Token
from .leases import DEFAULT_TTL, check_owner, check_ttl
from .policy import DEFAULT_ON_POISON, check_on_poison

#: The first backoff ceiling when none is given (smaller if the cap is smaller).
BASE_BACKOFF_S = 0.1
#: Batches in flight when none is given, in batch rounds to a broker: the overlap of the
#: selection, the broker's fsync and the marks' commit is most of a relay's rate there.
DEFAULT_INFLIGHT = 8


@dataclass
class RelaySettings:
    #: Where to send: a sink's URL, at any path (batches go to that path plus ``/batch``), or a
    #: broker's.
    url: str
    #: Send each selection in one request (True) or one event at a time (False). None: the
    #: target decides, batches to amqp:// and nats:// (each message confirmed on its own, a
    #: kill -9 re-sends at most the batches in flight), one event a request to HTTP.
    batch: bool | None = None
    limit: int = MAX_BATCH
    #: Seconds to wait when nothing is pending (or no partition can be leased).
    poll_interval: float = 0.5
    on_poison: str = DEFAULT_ON_POISON
    #: On PostgreSQL, also wake when a publish commits (LISTEN/NOTIFY); the poll stays. Off
    #: where LISTEN cannot work, e.g. through a PgBouncer in transaction pooling mode.
    listen: bool = True
    timeout: float = 5.0
    allowed_hosts: tuple[str, ...] = ()
    #: The sink's bearer token (HTTP targets only); its repr hides it.
    token: Token | None = None
    #: HTTP targets: ``exact`` (the identity-echo ACK) or ``status`` (any 2xx is the ACK).
    ack: str = "exact"
    #: Per-item rounds: fsync every mark ("each") or the last of each round ("last"; see
    #: ``dispatch``). A batch round's marks are one transaction either way.
    mark_sync: str = "each"
    #: Commit a batch's marks (per item: each event's mark, a durable commit of its own) on a
    #: second connection while the next batch or event is sent (``source.marking``; on
    #: leased partitions, lease-checked). Per item, only with ``mark_sync="each"``.
    pipeline: bool = False
    #: Batch rounds to a broker: publish up to this many batches before awaiting the oldest
    #: one's ACKs (``source.inflight``); 1: each batch waits for the one before it. A kill -9
    #: then leaves up to ``inflight * limit`` events sent and unmarked, all re-sent. None:
    #: ``DEFAULT_INFLIGHT`` in batch rounds to amqp:// and nats:// without ``pipeline``, else 1.
    inflight: int | None = None
    #: After the n-th failure in a row, wait a time drawn from
    #: [0, min(max_backoff, base_backoff * 2**n)]; ``seed`` makes the draws reproducible.
    base_backoff: float | None = None
    max_backoff: float = 30.0
    seed: int | None = None
    #: One of N relays: this relay's name in lease rows, unique among running relays.
    #: None: the single loop over the whole outbox.
    owner: str | None = None
    #: Seconds a lease lasts unrenewed (marks renew it); a crashed relay's partitions wait
    #: this long before another relay takes them.
    lease_ttl: float = DEFAULT_TTL
    #: The URL as logs and messages may show it (no password); set from ``url``.
    shown_url: str = field(init=False, default="")
    #: ``inflight`` as the relay uses it (None resolved).
    window: int = field(init=False, default=1)

    def __post_init__(self) -> None:
        self.shown_url = check_url(self.url, self.allowed_hosts)
        if self.batch is None:
            self.batch = is_broker(self.url)
        elif not isinstance(self.batch, bool):
            raise ValueError(f"batch: must be True, False or None, got {self.batch!r}")
        check_limit(self.limit)
        check_mark_sync(self.mark_sync)
        if self.pipeline and not self.batch and self.mark_sync != "each":
            raise ValueError(
                "pipeline: every mark committed behind the next send is durable; it does not "
                f"combine with mark_sync {self.mark_sync!r}"
            )
        if self.inflight is None:
            given = self.batch and is_broker(self.url) and not self.pipeline
            self.window = DEFAULT_INFLIGHT if given else 1
        elif check_inflight(self.inflight) > 1:
            self.window = self.inflight
            if not self.batch:
                raise ValueError("inflight: only batch rounds have batches in flight (add batch)")
            if self.pipeline:
                raise ValueError(
                    "inflight: already commits each batch's marks while the next batches are "
                    "in flight; it does not combine with pipeline"
                )
            if not is_broker(self.url):
                scheme = self.url.partition(":")[0].lower()
                raise ValueError(
                    f"inflight: more than one batch in flight is for amqp:// and nats:// "
                    f"targets, not {scheme}://"
                )
        check_on_poison(self.on_poison)
        if check_ack(self.ack) == "status" and not self.url.lower().startswith("http"):
            raise ValueError("ack: 'status' is for http:// and https:// targets")
        if not isinstance(self.listen, bool):
            raise ValueError(f"listen: must be True or False, got {self.listen!r}")
        value = self.poll_interval
        if not is_number(value) or not value > 0:
            raise ValueError(f"poll_interval: must be a positive number of seconds, got {value!r}")
        # Refused here, once, rather than by every send (which a relay would retry forever).
        check_timeout(self.timeout)
        if self.base_backoff is None:
            # The default first wait shrinks to a smaller cap; a base given above the cap is
            # an error (Backoff says so, when the relay builds its schedule).
            self.base_backoff = min(BASE_BACKOFF_S, self.max_backoff)
        if self.owner is not None:
            check_owner(self.owner)
            check_ttl(self.lease_ttl)
            check_ttl(self.max_backoff, "max_backoff")
            check_ttl(self.base_backoff, "base_backoff")

    def backoff(self, rng: random.Random | None = None) -> Backoff:
        """A fresh schedule; give the relay's one ``rng`` to each of its schedules."""
        assert self.base_backoff is not None  # set by __post_init__
        return Backoff(self.base_backoff, self.max_backoff, rng=rng)

    def rng(self) -> random.Random | None:
        return random.Random(self.seed) if self.seed is not None else None
