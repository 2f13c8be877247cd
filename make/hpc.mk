# Cluster runs (docs/cluster.md): grids jobs/<dataset>.yaml, profiles jobs/profiles/<name>.yaml.
# make submit DATASET=visa PROFILE=h100 [MODELS=a,b BACKBONES=.. ORDERINGS=.. PROTOCOLS=.. SEEDS=..]
#             [CLUSTER=slurm|local|debug] [CONTAINER=bench.sif|bench:lock-..] [PARALLELISM=N] [DRY_RUN=1] [ROOT=dir] [OUTPUTS=dir]
#             [JOBS_DIR=dir: submitit's job files, a folder only you can write; default OUTPUTS/<dataset>/logs]
# status and resubmit default grid, root, filters, profile, cluster and container to the earlier submissions'.
# DRY is non-empty when DRY_RUN=1|yes|true (used here and in scenarios.mk).
DRY := $(filter 1 yes true,$(DRY_RUN))
given = $(filter command line environment environment override,$(origin $(1)))
HPC_FILTERS = $(if $(MODELS),--models $(MODELS)) $(if $(BACKBONES),--backbones $(BACKBONES)) \
  $(if $(ORDERINGS),--orderings $(ORDERINGS)) $(if $(PROTOCOLS),--protocols $(PROTOCOLS)) \
  $(if $(SEEDS),--seeds $(SEEDS)) $(if $(ROOT),--root "$(ROOT)") $(if $(GRID),--grid "$(GRID)") --outputs "$(OUTPUTS)"
# paths in double quotes: CONTAINER='a dir/bench.sif' is one argument
HPC_SUBMIT = $(if $(CONTAINER),--container "$(CONTAINER)") \
  $(if $(CONTAINER_RUNTIME),--container-runtime $(CONTAINER_RUNTIME)) $(if $(JOBS_DIR),--jobs-dir "$(JOBS_DIR)") \
  $(if $(PARALLELISM),--parallelism $(PARALLELISM)) $(if $(DRY),--dry-run)

submit: $(STAMP) ## submit jobs/<DATASET>.yaml as job arrays, skipping complete/queued runs (PROFILE= CLUSTER= MODELS= DRY_RUN=1 ...)
	$(PY) -m bench submit --dataset $(DATASET) --profile $(PROFILE) --cluster $(CLUSTER) $(HPC_FILTERS) $(HPC_SUBMIT)

status: $(STAMP) ## one line per run of the grid: complete / running / pending / failed (log, error) / not submitted
	$(PY) -m bench status --dataset $(DATASET) $(HPC_FILTERS)

resubmit: $(STAMP) ## resubmit the failed and missing runs only (settings of the latest submission unless given)
	$(PY) -m bench resubmit --dataset $(DATASET) $(if $(call given,PROFILE),--profile $(PROFILE)) \
	  $(if $(call given,CLUSTER),--cluster $(CLUSTER)) $(HPC_FILTERS) $(HPC_SUBMIT)

slurm-up: ## start a single-node SLURM on this machine (root; installs slurm-wlm + munge if missing)
	bash jobs/slurm/local-cluster.sh start

slurm-down: ## stop the single-node SLURM started by slurm-up (cancels its jobs)
	bash jobs/slurm/local-cluster.sh stop
