# Tabular track (docs/tabular.md): the CAD scenario-construction framework.
# TABULAR_DATASET=synthetic (default; generated offline) | cicids2017 | cicids2018 | cicunsw, ROOT=dir (the CSV
# folder of a real dataset), CANDIDATES="natural:day,kmeans:nearest:5,...", TABULAR_ARGS="--quick --filter p_t=3 ..."
TABULAR_DATASET ?= $(if $(filter cicids2017 cicids2018 cicunsw,$(DATASET)),$(DATASET),synthetic)
TABULAR_OUT ?= $(OUTPUTS)/$(TABULAR_DATASET)/tabular
CANDIDATES ?= natural:day

.PHONY: tabular-scenarios
tabular-scenarios: $(STAMP) ## CAD framework: candidates → STE (AE, IForest, AE1SVM) → FC1-FC5 → orderings, W, Borda → release (DATASET=cicids2017|cicids2018|cicunsw ROOT=dir; default the synthetic tabular set)
	$(PY) -m bench tabular scenarios --dataset $(TABULAR_DATASET) $(if $(ROOT),--root $(ROOT)) \
	  --candidates $(CANDIDATES) --out $(TABULAR_OUT) $(TABULAR_ARGS)
