"""Metric families every component exports the same way (the ``server`` extra).

Figures read from the database carry ``scope="database"``: every replica reads the same rows
and reports the same value, so dashboards take ``max()`` of them across replicas, never
``sum()``. ``ackledger_build_info`` says which release each process runs.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .build import version

#: The label of every figure read from the database (the same on every replica).
DATABASE_SCOPE = {"scope": "database"}


def database_counter(name: str, help_text: str, value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, help_text, labels=list(DATABASE_SCOPE))
    family.add_metric(list(DATABASE_SCOPE.values()), value)
    return family


def database_gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=list(DATABASE_SCOPE))
    family.add_metric(list(DATABASE_SCOPE.values()), value)
    return family


class BuildInfo(Collector):
    """``ackledger_build_info{version, component} 1``: which release each process runs."""

    def __init__(self, component: str) -> None:
        self._component = component

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "ackledger_build_info",
            "Always 1; the labels say which ackledger release this process runs.",
            labels=["version", "component"],
        )
        family.add_metric([version(), self._component], 1)
        yield family
