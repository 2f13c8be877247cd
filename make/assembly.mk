# Stream-assembly study (docs/assembly.md): runs, grids and the report of assembled intrusion-detection streams.
# make demo-assembly: the synthetic CICIDS2017-format week (K=$(ASSEMBLY_K)) → jobs/synthetic-assembly.yaml (both
# arms, the paper's detectors) → make aggregate's tables and page, all here in about a minute.
# Real data: make submit DATASET=cicids2017-assembly|litnet-assembly ROOT=dir CLUSTER=...; make aggregate DATASET=...
ASSEMBLY_K ?= 1
ASSEMBLY_CLUSTER ?= debug
ASSEMBLY_DEMO_ROOT ?= $(OUTPUTS)/synthetic-assembly/data

.PHONY: demo-assembly
demo-assembly: $(STAMP) ## stream assembly end to end on the synthetic week: two arms, the paper's detectors, audit + AP beside chance, HTML page
	$(PY) -m bench assembly synthetic --root "$(ASSEMBLY_DEMO_ROOT)" -K $(ASSEMBLY_K)
	$(PY) -m bench submit --dataset synthetic-assembly --root "$(ASSEMBLY_DEMO_ROOT)" --outputs "$(OUTPUTS)" \
	  --cluster $(ASSEMBLY_CLUSTER) --profile cpu
	$(PY) -m bench aggregate --dataset synthetic-assembly --outputs "$(OUTPUTS)"
	@echo "open $(OUTPUTS)/synthetic-assembly/report/index.html"
