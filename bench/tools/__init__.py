"""Tools over the suite, each a subcommand of `python -m bench`: the performance benchmarks (perf/), the CPU-vs-GPU
device check, the demo. Nothing in the package imports them."""
