"""The garbage collector's pauses as metrics; start-up objects frozen out of its walks (tandem_core/gc_pauses.py)."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tandem_core.gc_pauses import freeze_startup_objects, pauses, watch_gc_pauses


def _samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, s.labels.get("generation", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_every_collection_is_counted_with_its_duration_by_generation():
    registry = CollectorRegistry()
    watch_gc_pauses(registry)
    before = _samples(registry)
    gc.collect(2)
    gc.collect(0)
    after = _samples(registry)
    assert after[("tandem_gc_collections_total", "2")] == before[("tandem_gc_collections_total", "2")] + 1
    assert after[("tandem_gc_collections_total", "0")] >= before[("tandem_gc_collections_total", "0")] + 1
    assert after[("tandem_gc_pause_seconds_total", "2")] > before[("tandem_gc_pause_seconds_total", "2")]
    assert 0 < after[("tandem_gc_pause_max_seconds", "2")] <= after[("tandem_gc_pause_seconds_total", "2")]
    assert pauses()[2][0] == after[("tandem_gc_collections_total", "2")]


def test_two_registries_in_one_process_see_the_same_collections():
    first, second = CollectorRegistry(), CollectorRegistry()
    watch_gc_pauses(first)
    callbacks = len(gc.callbacks)
    watch_gc_pauses(second)
    assert len(gc.callbacks) == callbacks  # one callback however many registries watch
    gc.collect(1)
    assert _samples(first) == _samples(second)


def test_frozen_startup_objects_leave_the_collectors_walks():
    held = [[i] for i in range(50_000)]  # objects alive at "start-up"
    try:
        walked = len(gc.get_objects())
        frozen = freeze_startup_objects()
        assert frozen >= len(held)
        assert len(gc.get_objects()) < walked - len(held)  # a full collection no longer visits them
        created = [-1]  # an object made while serving is walked as before
        tracked = {id(o) for o in gc.get_objects()}
        assert id(created) in tracked and id(held[0]) not in tracked
    finally:
        gc.unfreeze()
    assert id(held[0]) in {id(o) for o in gc.get_objects()}


def test_gc_bench_sums_each_settings_collections_over_its_workloads():
    from bench import gc_pauses as bench

    def scraped(n: float, seconds: float) -> dict:
        out = {}
        for g in "012":
            out[("tandem_gc_collections_total", g)] = n
            out[("tandem_gc_pause_seconds_total", g)] = seconds
        return out

    one = bench.workload_figures(scraped(10, 0.5), scraped(13, 0.8), tokens=1000, wall=10.0)
    assert one["tok_s"] == 100.0 and one["gen2_collections"] == 3 and abs(one["gen2_seconds"] - 0.3) < 1e-9
    two = bench.workload_figures(scraped(13, 0.8), scraped(14, 0.9), tokens=1000, wall=20.0)
    rows = bench.summarise({"frozen": [one, two]}, {"frozen": 0.25})
    assert rows[0]["gen1_collections"] == 4 and rows[0]["tok_s"] == 75.0
    assert abs(rows[0]["share"] - 3 * 0.4 / 30.0) < 1e-9  # every generation's seconds over the summed wall time
    results = {"workload": "w", "rounds": 2, "command": "c", "date": "d", "rows": rows}
    assert "| frozen | 75.0 | 4, 0.400 | 4, 0.400 | 4, 0.400 | 4.00% | 250.0 ms |" in bench.markdown(results)
