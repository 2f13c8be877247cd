#!/usr/bin/env bash
# `make container-check`, inside the job image, the way jobs run (docker/job-exec.sh, the checkout bound):
# the Python/torch/CUDA versions, the tiny synthetic benchmark, one PatchCore run and the metric tests.
# The SLURM job in the image is tests/hpc/test_container.py, which make runs next.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
engine=$(bash "$REPO/docker/image.sh" engine)
image=$(bash "$REPO/docker/image.sh" tag)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/bench-container-check.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
in_image() { bash "$REPO/docker/job-exec.sh" "$engine" "$image" "$REPO" "$REPO,$scratch" "$@"; }

echo "== $image ($engine): versions"
in_image -c 'import sys, torch, torchvision
print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"torchvision {torchvision.__version__}, GPU available: {torch.cuda.is_available()}")'
echo "== bench data --preset tiny"
in_image -m bench data --dataset synthetic --preset tiny --root "$scratch/tiny"
echo "== one PatchCore run (CL, 32 px, weights none)"
in_image -m bench run --dataset synthetic --root "$scratch/tiny" --model patchcore --weights none \
    --protocol cl --ordering easy_to_hard --image-size 32 --no-progress --out "$scratch/patchcore.h5"
echo "== metric tests"
in_image -m pytest -q -p no:cacheprovider tests/core/test_metrics.py
