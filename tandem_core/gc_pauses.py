"""Python's garbage collector in a serving process: start-up objects frozen, every pause counted.

A service holds a few hundred thousand objects from start-up on (the model's modules and parameters,
transformers, grpc, torch's Python side: about 420,000 in a target serving the default model, as
its start-up log line says), and each collection of the oldest generation walks all of them, in the
middle of whichever step made the allocation that crossed the threshold. ``freeze_startup_objects``
moves everything alive once start-up is done into the permanent generation, which the collector
never walks (``gc.freeze``); objects created while serving are collected as before.

``watch_gc_pauses`` adds to a metrics registry how many collections each generation ran, their total
seconds and the longest (``tandem_gc_collections_total``, ``tandem_gc_pause_seconds_total``,
``tandem_gc_pause_max_seconds``). The collector's callback only updates numbers in place: it runs
inside whatever allocation started the collection and must take no lock that code might hold.
"""

from __future__ import annotations

import gc
import time

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

GENERATIONS = (0, 1, 2)
_pauses = {g: [0, 0.0, 0.0] for g in GENERATIONS}  # generation -> [collections, seconds, longest]
_started = [0.0]  # perf_counter at the start of the collection under way (0: none)


def freeze_startup_objects() -> int:
    """Collect once, then freeze every object alive now; returns how many are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def watch_gc_pauses(registry: CollectorRegistry) -> None:
    """Report the collector's pauses in ``registry`` (counted from the process's first call on)."""
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)
    registry.register(_PauseCollector())


def pauses() -> dict[int, tuple[int, float, float]]:
    """Per generation: (collections, total seconds, longest seconds) since watching began."""
    return {g: (int(n), total, most) for g, (n, total, most) in _pauses.items()}


def _on_gc(phase: str, info: dict) -> None:
    now = time.perf_counter()
    if phase == "start":
        _started[0] = now
        return
    entry = _pauses.get(info.get("generation"))
    if entry is None or _started[0] == 0.0:
        return
    seconds = now - _started[0]
    _started[0] = 0.0
    entry[0] += 1
    entry[1] += seconds
    if seconds > entry[2]:
        entry[2] = seconds


class _PauseCollector:
    """The pause figures as metric families, read at each scrape."""

    def collect(self):
        labels = ["generation"]
        count = CounterMetricFamily("tandem_gc_collections", "Collections by Python's garbage collector", labels=labels)
        total = CounterMetricFamily("tandem_gc_pause_seconds", "Seconds the collections took", labels=labels)
        longest = GaugeMetricFamily("tandem_gc_pause_max_seconds", "The longest collection", labels=labels)
        for g, (n, seconds, most) in pauses().items():
            count.add_metric([str(g)], n)
            total.add_metric([str(g)], seconds)
            longest.add_metric([str(g)], most)
        return [count, total, longest]
