"""Stream assembly as a treatment (the stream-assembly paper): evaluation streams assembled from capture files,
what each assembly does to the evaluated sample, the paper's streaming and batch detectors, and their runs.

The records every part exchanges are typed in `bench.assembly.records`; docs/assembly.md is the user's guide.
"""
