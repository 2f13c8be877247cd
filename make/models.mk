# PaDiM, CFA and the task-bank (CL) variants (docs/models.md). PERF_ARGS=--quick for a smoke run.
.PHONY: perf-models

perf-models: $(STAMP) ## PaDiM batched vs per-location loop, CFA seconds/epoch, CL eval time + memory over 1…12 tasks
	$(PY) -m bench perf --only padim_task,cfa_epoch,cl_growth $(PERF_ARGS)
