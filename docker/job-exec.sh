#!/usr/bin/env bash
# Runs a job's Python inside a podman/docker image: the command prefix bench/hpc/containers.py gives submitit.
#   bash docker/job-exec.sh <podman|docker> <image id> <workdir> <bind>[,<bind>...] [python arguments...]
# Unlike apptainer, podman and docker pass no environment in: forward the job's own variables (SLURM's and
# submitit's, which tell the task which pickled job it is; the BENCH_* ones, the commit and container among them),
# read here, inside the job step, where they have their final values.
set -euo pipefail
engine=$1 image=$2 workdir=$3 binds=$4
shift 4
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$REPO/docker/podman/containers.conf}
export CONTAINERS_STORAGE_CONF=${CONTAINERS_STORAGE_CONF:-$REPO/docker/podman/storage.conf}

args=(run --rm --network host -w "$workdir" -e "PYTHONPATH=$workdir")
IFS=, read -ra paths <<< "$binds"
for path in "${paths[@]}"; do args+=(-v "$path:$path"); done
for name in $(compgen -e); do
    case $name in
        SLURM_*|SUBMITIT_*|BENCH_*|OMP_NUM_THREADS|HDF5_USE_FILE_LOCKING|HF_HUB_OFFLINE|CUDA_VISIBLE_DEVICES)
            args+=(-e "$name") ;;
    esac
done
# docker runs as root unless told: results must belong to the user who submitted (rootless podman maps this itself)
[ "$engine" = docker ] && args+=(--user "$(id -u):$(id -g)")
# A GPU job gets the node's GPUs (SLURM has set CUDA_VISIBLE_DEVICES to its share, forwarded above).
if [ -n "${SLURM_JOB_GPUS:-}${CUDA_VISIBLE_DEVICES:-}" ]; then
    if [ "$engine" = docker ]; then args+=(--gpus all); else args+=(--device nvidia.com/gpu=all); fi
fi
exec "$engine" "${args[@]}" "$image" python "$@"
