import sys

from bench.cli import main

# Guarded: multiprocessing's spawn start method re-imports the main module in its children (`python -m bench perf`
# spawns one per measurement, bench/tools/perf).
if __name__ == "__main__":
    sys.exit(main())
