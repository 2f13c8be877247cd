# Scenario extraction (docs/scenarios.md): single-task experts → STE table → orderings, Spearman, manifest.
# DATASET=multi selects the multi-dataset stream from the five datasets' manifests instead.
# ROOT=dir (dataset root), SCENARIOS_ARGS="--weights none --image-size 64 ..." (passed to `scenarios ste`, or to
# `scenarios multi` for DATASET=multi), SCENARIOS_OUT=dir, FORCE=1 (replace a manifest from another source).
SCENARIOS_OUT ?= outputs/$(DATASET)/scenarios

scenarios: $(STAMP) ## single-task experts per concept × PatchCore/PaDiM/CFA → STE table, orderings, Spearman, manifest (DATASET=name|multi)
ifeq ($(DATASET),multi)
	$(PY) -m bench scenarios multi --out $(SCENARIOS_OUT) $(if $(FORCE),--force) $(SCENARIOS_ARGS)
else
	$(PY) -m bench scenarios ste --dataset $(DATASET) $(if $(ROOT),--root $(ROOT)) --out $(SCENARIOS_OUT) $(SCENARIOS_ARGS)
	$(PY) -m bench scenarios rank --ste $(SCENARIOS_OUT)/ste.csv --out $(SCENARIOS_OUT) $(if $(FORCE),--force)
	$(PY) -m bench scenarios index --dataset $(DATASET) $(if $(ROOT),--root $(ROOT)) --force
endif
