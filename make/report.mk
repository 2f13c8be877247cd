# Reports: tables and figures from $(OUTPUTS)/<dataset>/runs/*.h5 only (docs/reports.md). OUTPUTS defaults to outputs.
aggregate: $(STAMP) ## tables + heatmaps + manifest + report/index.html from outputs/$(DATASET)/runs (DATASET=name|all; AGGREGATE_ARGS=...)
	$(PY) -m bench aggregate --dataset $(DATASET) --outputs $(OUTPUTS) $(AGGREGATE_ARGS)

figures: $(STAMP) ## `make aggregate` plus every per-method figure of the report as PNG and PDF, for papers (slower: ~0.1-0.4 s a figure)
	$(PY) -m bench aggregate --dataset $(DATASET) --outputs $(OUTPUTS) --paper-figures $(AGGREGATE_ARGS)

verify: $(STAMP) ## recompute every published cell of outputs/$(DATASET)/tables from the run files (exit 1: mismatch)
	$(PY) -m bench verify --dataset $(DATASET) --outputs $(OUTPUTS)
