# The job image (docs/cluster.md, Containers). docker/image.sh does the work with podman or docker, whichever
# works here; podman reads this repo's docker/podman/*.conf, never the machine's /etc/containers.
#   make image [BASE=<image>]     bench:lock-<hash of requirements.lock + docker/Dockerfile>, reused while unchanged
#   make image-base               the Debian stand-in base, where Docker Hub (the pytorch base) is unreachable
#   make sif [SIF=bench.sif]      OCI archive -> Apptainer image (or the command to run on the cluster)
#   make container-check          the image, a smoke test inside it, and one SLURM job in it
SIF ?= bench.sif
IMAGE_ENV = $(if $(BASE),BASE=$(BASE))

image: ## build the job image (podman or docker) from docker/Dockerfile, reused while the lock is unchanged (BASE=<image>)
	$(IMAGE_ENV) bash docker/image.sh build

image-base: ## make the Debian stand-in base (no Docker Hub): then make image BASE=localhost/bench-base:bookworm-py3.11
	bash docker/image.sh base

sif: image ## export the image as an OCI archive and convert it to bench.sif (SIF=) with apptainer, or print the command
	bash docker/image.sh sif $(SIF)

container-check: $(STAMP) image ## smoke test inside the image (versions, data, a PatchCore run, metric tests) + a SLURM job in it
	bash docker/check.sh
	BENCH_REQUIRE_CONTAINER=1 $(PY) -m pytest -q -p no:cacheprovider tests/hpc/test_container.py
