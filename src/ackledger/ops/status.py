"""What to watch: the outbox's figures and, when given, a sink's or ledger's counters.

A sink is named as everywhere else (``trace``, ``reconcile``, the console): its service's URL,
whose ``/metrics`` is read, or its inbox database, whose durable counters are read directly.

A service that cannot be read is reported as such next to the figures instead of failing
the whole look: the outbox's state is worth seeing most when a service is down.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .._core.timestamps import utc_timestamp
from ..errors import AckledgerError
from ..relay.leases import lease_words
from ..sink.inbox import Inbox
from ..source.outbox import Outbox
from ..store import database_errors, is_database_url, without_password
from ..wire.targets import ANY_PATH, base_url, check_target
from ..wire.token import Token
from .ack_kinds import STATUS_ACK
from .databases import is_url
from .probe import scrape

#: The services whose counters ``status`` shows, in the order it shows them.
SERVICES = ("sink", "ledger")
_COUNTER_PREFIX = {"sink": "ackledger_sink_", "ledger": "ackledger_ledger_"}
#: The route each service's URL may end in besides ``/metrics`` (the URL its clients use).
_ROUTE = {"sink": "/events", "ledger": "/deliveries"}


def service_url(url: str, service: str = "sink", allowed_hosts: Iterable[str] | None = None) -> str:
    """The base URL of a service to read /metrics from; UnsafeTarget before anything is read."""
    base = base_url(url, _ROUTE[service])
    check_target(base + "/metrics", ANY_PATH, allowed_hosts)
    return base


def inbox_counters(target: str) -> dict[str, Any]:
    """A sink's figures read from its inbox database (SQLite file or ``postgresql://`` URL)
    under the names its service's ``/metrics`` gives them: ``{"database", counter: value...}``,
    or ``{"database", "error"}``."""
    shown = without_password(target)
    try:
        with Inbox(target) as inbox:
            shown = inbox.backend.location
            found = inbox.counters()
            retention = inbox.retention()
    except Exception as exc:
        # The driver's errors are known only once it is loaded, by the open above.
        if not isinstance(exc, (OSError, AckledgerError, *database_errors())):
            raise
        return {"database": shown, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "database": shown,
        "applied": found["applied"],
        "conflicts": found["conflict"],
        "duplicates": found["duplicate"],
        "oldest_receipt_age_seconds": retention["oldest_receipt_age_s"] or 0.0,
        "purged": retention["purged"],
    }


def is_service(target: str) -> bool:
    """A sink named by its service's URL, rather than by its inbox database."""
    return is_url(target) and not is_database_url(target)


def service_counters(
    service: str,
    url: str,
    token: Token | None = None,
    *,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
) -> dict[str, Any]:
    """``{"url", counter: value...}`` from the service's /metrics, or ``{"url", "error"}``."""
    try:
        # ``url`` is a base (``service_url``): its /metrics names a mounted service's too.
        metrics = url.rstrip("/") + "/metrics"
        samples = scrape(metrics, timeout=timeout, allowed_hosts=allowed_hosts, token=token)
    except (OSError, AckledgerError) as exc:
        return {"url": url, "error": f"{type(exc).__name__}: {exc}"}
    prefix = _COUNTER_PREFIX[service]
    counters: dict[str, Any] = {"url": url}
    for name, value in sorted(samples.items()):
        if name.startswith(prefix):
            counters[name[len(prefix) :]] = int(value) if value.is_integer() else value
    return counters


@dataclass(frozen=True)
class Status:
    location: str  #: the outbox as shown to people (never with its password)
    figures: dict[str, Any]  #: what ``status --json`` prints

    @property
    def unreadable(self) -> list[str]:
        """The services given that could not be read."""
        return [name for name in SERVICES if "error" in self.figures.get(name, {})]

    def text(self) -> str:
        report = self.figures
        error = report["last_error"]
        last_error = (
            f"{error['id']} at {utc_timestamp(error['at'])}: {error['error']}" if error else "-"
        )
        rows = [
            ("pending", report["pending"]),
            ("oldest pending age", f"{report['oldest_pending_age_s']:.1f} s"),
            ("attempts", report["attempts"]),
            ("sent", report["sent"]),
            ("quarantined", report["quarantined"]),
            ("purged", report["purged"]),
            ("last error", last_error),
        ]
        if report.get("ack"):
            rows.append(("ack", report["ack"]))
        rows += [
            (f"partition {held['partition']}", lease_words(held) + f" ({held['pending']} pending)")
            for held in report.get("held_by_lease", [])
        ]
        sections: list[tuple[str, str, list[tuple[str, Any]]]] = [("outbox", self.location, rows)]
        for service in SERVICES:
            if service in report:
                counters = report[service]
                where = counters["url"] if "url" in counters else counters["database"]
                shown = [
                    (k, _shown(k, v)) for k, v in counters.items() if k not in ("url", "database")
                ]
                sections.append((service, where, shown))
        # One column for every section's labels: a counter's long name must not push its
        # value out of line with the others.
        width = max([20] + [len(label) for _, _, found in sections for label, _ in found])
        lines = []
        for name, where, found in sections:
            lines.append(f"{name:<7} {where}")
            lines += [f"  {label:<{width}} {value}" for label, value in found]
        return "\n".join(lines)


def _ack_words(targets: list[dict[str, Any]]) -> str | None:
    """What the latest relay's marks rest on, when it is not the exact ACK."""
    if not targets or targets[-1]["ack"] != "status":
        return None
    return f"{STATUS_ACK}: {targets[-1]['target']} is relayed to with --ack status"


def _shown(label: str, value: Any) -> Any:
    """A counter's value as the table shows it: seconds to a tenth, with their unit, as the
    outbox's own ages; other fractions to six significant digits."""
    if type(value) is not float:
        return value
    return f"{value:.1f} s" if label.endswith("_seconds") else f"{value:.6g}"


def read_status(
    source: str,
    *,
    sink: str | None = None,
    ledger: str | None = None,
    token: Token | None = None,
    timeout: float = 5.0,
    allowed_hosts: Iterable[str] | None = None,
) -> Status:
    """The outbox's figures (``Outbox.stats``) with the counters of the services given (each
    named by its base URL, its /metrics URL, or its own route's URL; the sink also by its
    inbox database)."""
    hosts = None if allowed_hosts is None else tuple(allowed_hosts)
    given = {"sink": sink if sink is None or is_service(sink) else None, "ledger": ledger}
    services = {
        name: service_url(url, name, hosts) for name, url in given.items() if url is not None
    }
    with Outbox(source) as outbox:
        figures: dict[str, Any] = outbox.stats()
        figures["held_by_lease"] = outbox.held_by_leases()
        figures["ack"] = _ack_words(outbox.targets())
        location = outbox.backend.location
    if sink is not None and not is_service(sink):
        figures["sink"] = inbox_counters(sink)
    for name, url in services.items():
        figures[name] = service_counters(name, url, token, timeout=timeout, allowed_hosts=hosts)
    return Status(location, figures)
