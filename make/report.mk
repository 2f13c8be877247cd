# Reports: tables and figures from outputs/<dataset>/runs/*.h5 only (docs/reports.md).
aggregate: $(STAMP) ## tables + heatmaps + manifest from outputs/$(DATASET)/runs (DATASET=name|all; AGGREGATE_ARGS=...)
	$(PY) -m bench aggregate --dataset $(DATASET) $(AGGREGATE_ARGS)

verify: $(STAMP) ## recompute every published cell of outputs/$(DATASET)/tables from the run files (exit 1 on a mismatch)
	$(PY) -m bench verify --dataset $(DATASET)
