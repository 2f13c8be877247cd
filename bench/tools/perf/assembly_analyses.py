"""Performance benchmarks of the stream-assembly analyses (bench.assembly.analyses).

  assembly_bootstrap  the paired moving-block bootstrap: 1,000 resamples of a 240,000-record slice for two
                      scorers (AP and AUC-ROC each), against the straightforward loop (index the slice, call
                      sklearn per resample) on the same draws; the loop is timed on 10 resamples and its
                      1,000-resample time extrapolated. Target: ≤ 30 s on 2 cores.
  assembly_analyses   the whole §1 set for two arms and three scorers on a 1.6-million-record stand-in, the
                      detectors' own passes excluded: seconds per analysis, total, peak RSS. Target: ≤ 10 min.

Registered by naming this module in bench.tools.perf.BENCHMARK_MODULES.
"""

from __future__ import annotations

from bench.tools.perf import benchmark, peak_rss_mb, run_isolated


def _bootstrap_child(m: int, resamples: int, loop_resamples: int) -> dict:
    from bench.assembly.analyses.perf import perf_bootstrap

    return {**perf_bootstrap(m, resamples, loop_resamples), "peak_rss_mb": round(peak_rss_mb())}


@benchmark("assembly_bootstrap")
def assembly_bootstrap(args) -> dict:
    """1,000 resamples × 240,000 records × 2 scorers vs the per-resample loop. --quick: 5,000 records, 20
    resamples."""
    return run_isolated(_bootstrap_child, *((5_000, 20, 4) if args.quick else (240_000, 1000, 10)))


def _section1_child(n: int, resamples: int) -> dict:
    from bench.assembly.analyses.perf import perf_section1

    return perf_section1(n, resamples)


@benchmark("assembly_analyses")
def assembly_analyses(args) -> dict:
    """The whole §1 set of the stream-assembly analyses (shared records, cut sweep, batch ladder, branches,
    prevalence draws; every interval at every block length) for two arms and three scorers on a 1.6-million-record
    stand-in, the detectors' own passes excluded. Targets: ≤ 10 min on 2 cores, memory bounded by the per-record
    scores. --quick: 16,000 records, 20 resamples."""
    return run_isolated(_section1_child, *((16_000, 20) if args.quick else (1_600_000, 1000)))
