# Scenario extraction (docs/scenarios.md): single-task experts → STE table → orderings, Spearman, manifest.
# DATASET=multi selects the multi-dataset stream from the five datasets' manifests instead.
# ROOT=dir (dataset root), SCENARIOS_ARGS="--weights none --image-size 64 ..." (passed to `scenarios ste`, or to
# `scenarios multi` for DATASET=multi), SCENARIOS_OUT=dir, FORCE=1 (replace a manifest from another source).
# STE_CLUSTER=inprocess (default: the STE runs one after another here) | slurm | local | debug: the runs go through
# `make submit`'s job machinery (PROFILE=, PARALLELISM=, CONTAINER=, DRY_RUN=1 apply). With slurm/local the target
# stops after submitting; run it again (it prints the runs' states, resubmits failed ones) to collect and rank once all are done.
SCENARIOS_OUT ?= outputs/$(DATASET)/scenarios
STE_CLUSTER ?= inprocess
STE_HPC = $(if $(filter-out inprocess,$(STE_CLUSTER)),--cluster $(STE_CLUSTER) --profile $(PROFILE) $(HPC_SUBMIT),$(if $(DRY),--dry-run))
# Ranking and indexing, once the STE table is complete (both branches below).
STE_RANK = $(PY) -m bench scenarios rank --ste $(SCENARIOS_OUT)/ste.csv --out $(SCENARIOS_OUT) $(if $(FORCE),--force)
STE_INDEX = $(PY) -m bench scenarios index --dataset $(DATASET) $(if $(ROOT),--root $(ROOT)) --force

# DATASET names a result set (outputs/<name>/runs); its track routes it, not a list of names: `bench track-of`
# prints `<track> <dataset>` (tabular-synthetic: `tabular synthetic`), asked once, only by a target that needs it.
TRACK_OF = $(eval TRACK_OF := $(shell $(PY) -m bench track-of $(DATASET)))$(TRACK_OF)

scenarios: $(STAMP) ## single-task experts per concept × PatchCore/PaDiM/CFA → STE table, orderings, Spearman, manifest (DATASET=name|multi STE_CLUSTER=inprocess|slurm|local|debug; tabular datasets: make/tabular.mk)
	@+route="$$($(PY) -m bench track-of $(DATASET))" && $(MAKE) --no-print-directory scenarios-$${route%% *} TRACK_OF="$$route"

.PHONY: scenarios-image scenarios-tabular
scenarios-tabular: tabular-scenarios

scenarios-image: $(STAMP)
ifeq ($(DATASET),multi)
	$(PY) -m bench scenarios multi --out $(SCENARIOS_OUT) $(if $(FORCE),--force) $(SCENARIOS_ARGS)
else
	$(PY) -m bench scenarios ste --dataset $(DATASET) $(if $(ROOT),--root $(ROOT)) --out $(SCENARIOS_OUT) $(STE_HPC) $(SCENARIOS_ARGS)
ifneq ($(DRY),)
	@echo "dry run: nothing submitted, nothing ranked"
else ifneq ($(filter-out inprocess,$(STE_CLUSTER)),)
	@if [ -f $(SCENARIOS_OUT)/ste.pending ]; then \
	  echo "STE runs not all complete: rerun \`make scenarios DATASET=$(DATASET) STE_CLUSTER=$(STE_CLUSTER) ...\` once the jobs finish"; \
	else \
	  $(STE_RANK) && \
	  $(STE_INDEX); \
	fi
else
	$(STE_RANK)
	$(STE_INDEX)
endif
endif
