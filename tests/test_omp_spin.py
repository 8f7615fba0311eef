"""The benchmark that compares OpenMP busy-wait settings (``python -m bench.omp_spin``)."""

from __future__ import annotations

from bench import omp_spin


def test_omp_spin_sets_each_runs_environment():
    assert omp_spin.run_env("default")["GOMP_SPINCOUNT"] == omp_spin.LIBGOMP_DEFAULT
    assert omp_spin.run_env("2000")["GOMP_SPINCOUNT"] == "2000"


def test_omp_spin_reports_the_median_speedup_of_each_setting_over_its_rounds():
    def run(speedup: float, tok_s: float) -> list[dict]:
        overall = {"config": "eagle k=1", "concurrency": 4, "category": "overall", "speedup": speedup, "tok_s": tok_s}
        return [overall, {**overall, "category": "qa", "speedup": 9.0}]

    runs = {"default": [run(0.9, 50.0), run(1.0, 60.0), run(1.3, 40.0)], "20000": [run(1.1, 70.0)]}
    rows = omp_spin.collect(runs)
    assert [(r["setting"], r["speedup"], r["tok_s"]) for r in rows] == [("default", 1.0, 50.0), ("20000", 1.1, 70.0)]
    assert rows[0]["speedups"] == [0.9, 1.0, 1.3]  # the category rows are not mixed in
    results = {"rounds": 3, "command": "python -m bench.omp_spin", "date": "today", "rows": rows}
    text = omp_spin.markdown(results | {"burn_ms": {"default": 8.04, "20000": 0.61}})
    assert "default 8.0 ms, 20000 0.6 ms" in text
    assert "| default | eagle k=1 | 4 | 50.0 | 1.00x | 0.90x, 1.00x, 1.30x |" in text
