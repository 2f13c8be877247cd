import sys

from bench.cli import main

# Guarded: multiprocessing's spawn start method re-imports the main module in its children (bench.tools.perf uses it).
if __name__ == "__main__":
    sys.exit(main())
