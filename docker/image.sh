#!/usr/bin/env bash
# The job image: build it from docker/Dockerfile, reuse it while the lock is unchanged, export it for Apptainer.
# Called by make/container.mk (`make image`, `make image-base`, `make sif`, `make container-check`):
#   docker/image.sh engine            the working container engine (podman or docker); installs podman if none
#   docker/image.sh tag               bench:lock-<sha256(requirements.lock + docker/Dockerfile)[:12]>
#   docker/image.sh build             build the tag unless an image of it exists (BASE=<image> swaps the base)
#   docker/image.sh base              the Debian stand-in base for machines that cannot reach Docker Hub
#   docker/image.sh sif [OUT.sif]     bench.tar (OCI archive) and, where apptainer exists, OUT.sif
# podman reads this repo's docker/podman/*.conf (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF), never /etc/containers.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$REPO/docker/podman/containers.conf}
export CONTAINERS_STORAGE_CONF=${CONTAINERS_STORAGE_CONF:-$REPO/docker/podman/storage.conf}
STANDIN_BASE=localhost/bench-base:bookworm-py3.11

die() { echo "$*" >&2; exit 2; }

# The Dockerfile's own default (ARG BASE), fully qualified: podman resolves no short names without registries.conf.
default_base() { sed -n 's/^ARG BASE=//p' "$REPO/docker/Dockerfile"; }
lock_hash() { cat "$REPO/requirements.lock" "$REPO/docker/Dockerfile" | sha256sum | cut -c1-12; }
tag() { echo "bench:lock-$(lock_hash)"; }

# A binary is not an engine: docker needs a daemon that answers (`docker info`), podman needs nothing running.
engine() {
    if [ -n "${ENGINE:-}" ]; then
        case "$ENGINE" in podman|docker) ;; *) die "ENGINE=$ENGINE: expected podman or docker";; esac
        command -v "$ENGINE" >/dev/null || die "ENGINE=$ENGINE: $ENGINE is not installed (apt-get install podman runc)"
        # else every later step reads the missing daemon as "no such image"
        [ "$ENGINE" = podman ] || docker info >/dev/null 2>&1 ||
            die "ENGINE=docker: no docker daemon answers (\`docker info\` fails): start it, or use ENGINE=podman"
        echo "$ENGINE"; return
    fi
    if command -v podman >/dev/null; then echo podman; return; fi
    if command -v docker >/dev/null && docker info >/dev/null 2>&1; then echo docker; return; fi
    install_podman >&2
    echo podman
}

install_podman() {
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        die "no container engine: neither podman nor a running docker daemon;" \
            "install podman (apt-get install podman runc)"
    fi
    echo "installing podman and runc (Debian packages)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc >/dev/null
}

image_exists() { "$1" image inspect "$2" >/dev/null 2>&1; }

build() {
    local eng base tag conf
    eng=$(engine); tag=$(tag); base=${BASE:-$(default_base)}
    if image_exists "$eng" "$tag"; then
        local built_from
        built_from=$("$eng" image inspect --format '{{ index .Labels "bench.base" }}' "$tag")
        if [ "$built_from" = "$base" ]; then echo "$tag: up to date (lock $(lock_hash), base $base)"; return; fi
        echo "$tag: built from $built_from; rebuilding from $base"
    fi
    check_base "$eng" "$base"
    # The RETURN trap outlives this function (as in base()): it clears itself, or main's return trips `set -u`.
    conf=$(mktemp); trap 'rm -f -- "${conf:-}"; trap - RETURN' RETURN
    local -a mounts=(-v "$conf:/etc/pip.conf:ro")
    while read -r path; do [ -n "$path" ] && mounts+=(-v "$path:$path:ro"); done \
        < <(python3 "$REPO/docker/pip_config.py" "$conf")
    echo "building $tag from $base with $eng (pip: the host's index settings, mounted read-only)"
    "$eng" build "${mounts[@]}" --network host --build-arg "BASE=$base" \
        --label "bench.lock=$(lock_hash)" --label "bench.base=$base" \
        -f "$REPO/docker/Dockerfile" -t "$tag" "$REPO"
}

# The base must be here (pulled if need be) and run CPython 3.11 as `python`: one line saying what to do otherwise,
# before a build that would fail minutes later (the Dockerfile's own check still guards builds made without this).
check_base() {
    local eng=$1 base=$2
    if ! image_exists "$eng" "$base"; then
        [[ $base == localhost/* ]] && die "BASE=$base: no such image: make it with \`make image-base\`"
        "$eng" pull "$base" >&2 || die "BASE=$base cannot be pulled (no registry access?):" \
            "\`make image-base\`, then \`make image BASE=$STANDIN_BASE\`"
    fi
    "$eng" run --rm "$base" python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' >/dev/null 2>&1 ||
        die "BASE=$base has no Python 3.11 (the lock's) as \`python\`:" \
            "choose a base that has it (\`make image-base\` makes one)"
}

# The stand-in for the pytorch base where Docker Hub is unreachable: Debian bookworm's CPython 3.11 with a venv
# on PATH, as the pytorch image has its conda `python`. The lock then installs torch (CUDA wheels) itself.
base() {
    local eng tar
    eng=$(engine)
    [ "$eng" = podman ] || die "make image-base needs podman (podman import); this machine has $eng"
    if image_exists podman "$STANDIN_BASE"; then echo "$STANDIN_BASE: exists"; return; fi
    command -v mmdebstrap >/dev/null || {
        [ "$(id -u)" = 0 ] || die "mmdebstrap is not installed: apt-get install mmdebstrap"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null; }
    # The RETURN trap outlives this function: it clears itself, or a later return trips `set -u` on the local $tar.
    tar=$(mktemp --suffix .tar); trap 'rm -f -- "${tar:-}"; trap - RETURN' RETURN
    mmdebstrap --variant=minbase --include=python3.11,python3.11-venv,ca-certificates \
        --customize-hook='chroot "$1" python3.11 -m venv /opt/venv' bookworm "$tar"
    podman import --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' "$tar" "$STANDIN_BASE"
}

sif() {
    local eng tag out=${1:-bench.sif} archive
    eng=$(engine); tag=$(tag); archive="${out%.sif}.tar"
    image_exists "$eng" "$tag" || die "image $tag not found: build it with \`make image\`"
    rm -f "$archive"
    if [ "$eng" = podman ]; then
        podman save --format oci-archive -o "$archive" "$tag"
    else  # docker save writes a docker-archive, which apptainer converts as well
        docker save -o "$archive" "$tag"
    fi
    local src=oci-archive; [ "$eng" = docker ] && src=docker-archive
    if command -v apptainer >/dev/null; then
        apptainer build --force "$out" "$src://$archive"
    else
        echo "wrote $archive; apptainer is not installed here: copy it to the cluster and run there"
        echo "  apptainer build $(basename "$out") $src://$(basename "$archive")"
    fi
}

main() {
    case "${1:-}" in
        engine) engine ;;
        tag) tag ;;
        build) build ;;
        base) base ;;
        sif) shift; sif "$@" ;;
        *) die "usage: docker/image.sh engine|tag|build|base|sif [OUT.sif]" ;;
    esac
}
# One line, read whole before it runs: editing this file during a long build cannot feed bash a half-read tail.
main "$@"; exit
