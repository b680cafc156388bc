"""Durable counters: totals that only grow, kept in the ``ackledger_counters`` table.

Everyone bumps them (the sink's outcomes, the ledger's, the outbox's purges). A bump is an
upsert, so a counter needs no row before its first use.
"""

from __future__ import annotations

import abc
import functools
import itertools
from collections.abc import Mapping

from .executor import Executor

_BUMP = (
    "INSERT INTO ackledger_counters (name, value) VALUES {rows} "
    "ON CONFLICT (name) DO UPDATE SET value = ackledger_counters.value + excluded.value"
)


@functools.lru_cache(maxsize=16)
def bump_sql(count: int) -> str:
    # One multi-row upsert: the names of one bump are distinct (a mapping's keys), which is
    # what PostgreSQL needs of the rows of one ON CONFLICT DO UPDATE.
    return _BUMP.format(rows=", ".join(["(?, ?)"] * count))


def bump_statement(counts: Mapping[str, int]) -> tuple[str, tuple[str | int, ...]]:
    """The one upsert that adds each ``counts[name]`` to its counter, and its parameters."""
    return bump_sql(len(counts)), tuple(itertools.chain.from_iterable(counts.items()))


def bump_returning_statement(
    counts: Mapping[str, int],
) -> tuple[str, tuple[str | int, ...]]:
    """``bump_statement`` that also returns each counter's new ``(name, value)``."""
    sql, params = bump_statement(counts)
    return sql + " RETURNING name, value", params


#: The bump of two counters at once (an outcome's and the arrival numbers'), bound once.
BUMP_TWO = bump_sql(2)


class CounterQueries(Executor):
    def counter_bump(self, name: str, by: int = 1) -> None:
        self.counters_bump({name: by})

    def counters_bump(self, counts: Mapping[str, int]) -> None:
        """Add each ``counts[name]`` to its counter, all in one statement."""
        if counts:
            self.execute(*bump_statement(counts))

    @abc.abstractmethod
    def counter_bump_spread(self, name: str) -> None:
        """Add one to a counter that many transactions bump at once, without making them
        queue: a counter row stays locked from its bump until commit, so a server database
        spreads the counter over rows ``name#N`` that ``counters_read`` sums."""

    def counters_read(self, prefix: str) -> dict[str, int]:
        """The counters named ``prefix...``, without the prefix; a spread counter's rows summed."""
        rows = self.execute(
            "SELECT name, value FROM ackledger_counters WHERE name LIKE ?", (prefix + "%",)
        )
        found: dict[str, int] = {}
        for name, value in rows:
            short = str(name)[len(prefix) :].split("#", 1)[0]
            found[short] = found.get(short, 0) + int(value)
        return found
