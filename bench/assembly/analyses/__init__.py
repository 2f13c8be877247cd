"""The stream-assembly analyses (stream-assembly paper §6–§8 and §11): each module takes `records.ScoredStream`s
(one detector's per-record scores over one arm), plus the `records.Corpus` and a detector spec where it must refit
or rescore, and returns typed results; `tables(result) -> dict[str, DataFrame]` gives what the report shows.

  metrics      AP (sklearn's definition) and AUC-ROC, with the chance level and the normalised lift beside AP
  bootstrap    the paired moving-block bootstrap of one slice (every interval of the study)
  shared       §6.1: both arms restricted to the records both held out
  cutsweep     §6.2: the chronological cut sweep over both arms
  batchladder  §6.3: a batch-dependent detector's scores on fixed records inside growing / different batches
  branches     §7:   the branches of a composed score against the deployed score
  prevalence   §8:   stratified resampling of one arm to named prevalence levels
  crossed      §11:  history from one arm, evaluated sample from the other
  events       §11:  range-based precision and recall over attack runs (Tatbul et al., 2018)

This package imports nothing from its own modules' callers; `__init__` imports no submodule.
"""
