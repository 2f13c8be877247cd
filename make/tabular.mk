# Tabular track (docs/tabular.md): the CAD scenario-construction framework.
# TABULAR_DATASET=synthetic (default; generated offline) | cicids2017 | cicids2018 | cicunsw, ROOT=dir (the CSV
# folder of a real dataset), CANDIDATES="natural:day,kmeans:nearest:5,...", TABULAR_ARGS="--quick --filter p_t=3 ..."
# DATASET=tabular-synthetic names the default; DATASET=tabular-multi: a multi-dataset scenario over MULTI="cicids2017=DIR,cicunsw=DIR" (synthetic= needs no
# DIR); candidates natural:dataset, natural:dataset_day or clustering (METHOD:VARIANT:K, @dataset: per dataset).
# DATASET of the tabular track (TRACK_OF, make/scenarios.mk: `bench track-of`) names its dataset; any other: synthetic.
TABULAR_DATASET ?= $(if $(filter tabular,$(word 1,$(TRACK_OF))),$(word 2,$(TRACK_OF)),synthetic)
TABULAR_OUT ?= $(OUTPUTS)/$(TABULAR_DATASET)/tabular
CANDIDATES ?= $(if $(filter multi,$(TABULAR_DATASET)),natural:dataset,natural:day)
TABULAR_DATA = $(if $(filter multi,$(TABULAR_DATASET)),--multi $(or $(MULTI),$(error DATASET=tabular-multi needs MULTI=name=DIR,name=DIR (NAME: a tabular dataset of `python -m bench tabular index --help`))),--dataset $(TABULAR_DATASET) $(if $(ROOT),--root $(ROOT)))

.PHONY: tabular-scenarios
tabular-scenarios: $(STAMP) ## CAD framework: candidates → STE (AE, IForest, AE1SVM) → FC1-FC5 → orderings, W, Borda → release (DATASET=cicids2017|cicids2018|cicunsw ROOT=dir, or tabular-multi MULTI=...; default the synthetic tabular set)
	$(PY) -m bench tabular scenarios $(TABULAR_DATA) \
	  --candidates $(CANDIDATES) --out $(TABULAR_OUT) $(TABULAR_ARGS)
