"""The tabular track: the CAD scenario-construction framework (docs/tabular.md).

Data (cic.py readers, synthetic.py, preprocess.py record index) → task discovery (discovery.py) → single-task
experts and STE matrices (ste.py, detectors/) → FC1–FC5 (filtering.py) → six orderings, Kendall's W, Borda
(orderings.py) → the released scenario (scenario.py); its runs go through the generic runner as a track
(track.py, registered in bench.tracks) with the record protocols (protocols.py). Pure numpy/pandas/scikit-learn/
scipy except the PyOD detectors.
"""
