# Continual anomaly detection benchmark suite. `make help` lists the targets.
SHELL := /bin/bash
PYTHON_SYS ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

DATASET ?= synthetic
PROFILE ?= cpu
CLUSTER ?= slurm
SEED ?= 0
OUTPUTS ?= outputs
export HDF5_USE_FILE_LOCKING := FALSE
export HF_HUB_OFFLINE := 1

.DEFAULT_GOAL := help
.PHONY: help venv test test-fast demo demo-all data perf device-check weights lock submit status resubmit aggregate figures verify scenarios image image-base sif container-check slurm-up slurm-down clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | awk -F'\t' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): requirements.lock pyproject.toml
	@test -x $(PY) || $(PYTHON_SYS) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.lock
	$(PY) -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e .
	@# a prerequisite dated in the future (a clock skew, an unpacked archive) would leave the stamp older than it
	@# and make every target reinstall: the stamp then takes the newest prerequisite's time
	@touch $(STAMP); for f in $^; do if [ "$$f" -nt $(STAMP) ]; then \
	  echo "note: $$f is dated in the future ($$(date -r "$$f" -u '+%F %T UTC')); the venv stamp takes its time" >&2; \
	  touch -r "$$f" $(STAMP); fi; done

venv: $(STAMP) ## create/update .venv from requirements.lock

test: $(STAMP) ## run the test suite (CPU, tiny images, weights=none)
	@$(PY) -m pytest -q --durations=20 $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

test-fast: $(STAMP) ## the tests not marked slow (no end-to-end runs): a quick check while developing
	@$(PY) -m pytest -q --durations=20 -m "not slow" $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test-fast: pytest collected no tests" >&2; exit 1; fi; exit $$rc

demo: $(STAMP) ## synthetic benchmark + PatchCore/PaDiM/CFA/FastFlow, NCL/CL, three orderings + Table 2 (CPU, weights=none)
	$(PY) -m bench demo

demo-all: $(STAMP) ## the demo with every registered detector (longer than `make demo`)
	$(PY) -m bench demo --all

data: $(STAMP) ## generate the synthetic benchmark (DATASET=synthetic [PRESET=demo|tiny|visa-scale]); real data: see data/README.md
	$(PY) -m bench data --dataset $(DATASET) $(if $(PRESET),--preset $(PRESET),)

perf: $(STAMP) ## performance benchmarks (coreset, PatchCore task, passes/image, pixel ROC-AUC, PaDiM, CFA, CL growth)
	$(PY) -m bench perf $(PERF_ARGS)

device-check: $(STAMP) ## on a GPU node: CPU vs CUDA agreement of every model + GPU throughput (outputs/device/)
	$(PY) -m bench device-check $(DEVICE_CHECK_ARGS)

weights: $(STAMP) ## stage torchvision-style ImageNet weights into data/weights/ (needs internet)
	HF_HUB_OFFLINE=0 $(PY) -m bench weights --stage

lock: ## regenerate requirements.lock from the current .venv
	@echo "# Exact pins for the suite's environment (Python 3.11, x86_64). Regenerate with \`make lock\`." > requirements.lock.new
	@echo "# torch/torchvision are the CUDA 13 builds: the same wheels run on CPU and on the H100/L40 nodes." >> requirements.lock.new
	$(PY) -m pip freeze --exclude-editable | grep -v '^-e ' >> requirements.lock.new && mv requirements.lock.new requirements.lock

# Feature areas add their targets in make/*.mk (cluster jobs, reports, scenarios).
include $(sort $(wildcard make/*.mk))

clean: ## remove outputs/ (results, logs, tables); keeps .venv and data/
	rm -rf outputs
