#!/usr/bin/env bash
# Build the sidecar image offline-capable and hermetic (see docs/deploy.md, "Building the image offline"):
#   1. base: $BASE if given, else a Debian image made from Debian packages with mmdebstrap
#      (minbase + python3, python3-venv, passwd, libdeflate0 for the gzip decoder) and imported as localhost/rlm-debian-base:$SUITE;
#   2. wheelhouse: the project's wheel and every dependency's, built on this host with $PYTHON's pip
#      into deploy/docker/wheelhouse/ (a wheel cache in $WHEEL_CACHE makes later builds offline);
#   3. $RUNTIME build with --build-arg BASE: the image installs from the wheelhouse with --no-index.
# usage: deploy/docker/build-image.sh [TAG]        (default kafka-rlm-sidecar:0.1.0)
# env:   RUNTIME=podman|docker  BASE=image  SUITE=bookworm  PYTHON=.venv/bin/python
#        WHEEL_CACHE=.cache/image/wheels  ROOTFS_CACHE=.cache/image  EXTRAS=s3,hdfs,http,kafka
# The wheelhouse must match the base's Python (Debian bookworm: CPython 3.11, glibc 2.36): build it
# with a 3.11 interpreter (or set PYTHON), or give BASE an image with the same Python as the host.
set -euo pipefail
cd "$(dirname "$0")/../.."
TAG=${1:-kafka-rlm-sidecar:0.1.0}
RUNTIME=${RUNTIME:-podman}
SUITE=${SUITE:-bookworm}
PYTHON=${PYTHON:-.venv/bin/python}
WHEEL_CACHE=${WHEEL_CACHE:-.cache/image/wheels}
ROOTFS_CACHE=${ROOTFS_CACHE:-.cache/image}
EXTRAS=${EXTRAS:-s3,hdfs,http,kafka}
WHEELHOUSE=deploy/docker/wheelhouse

say() { echo "build-image: $*" >&2; }

if [ -z "${BASE:-}" ]; then
  BASE=localhost/rlm-debian-base:$SUITE
  if ! "$RUNTIME" image exists "$BASE" 2>/dev/null && ! "$RUNTIME" image inspect "$BASE" >/dev/null 2>&1; then
    tar="$ROOTFS_CACHE/rootfs-$SUITE.tar"
    if [ ! -s "$tar" ]; then
      command -v mmdebstrap >/dev/null || { say "mmdebstrap is missing (apt-get install mmdebstrap) or set BASE"; exit 2; }
      mkdir -p "$ROOTFS_CACHE"
      say "making the Debian $SUITE base with mmdebstrap -> $tar"
      mmdebstrap --quiet --format=tar --variant=minbase --include=python3,python3-venv,passwd,libdeflate0 \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' "$SUITE" "$tar.part"
      mv "$tar.part" "$tar"
    fi
    say "importing $tar as $BASE"
    "$RUNTIME" import --change 'CMD ["/bin/bash"]' "$tar" "$BASE" >/dev/null
  fi
fi

say "wheelhouse -> $WHEELHOUSE/{deps,project}"
rm -rf "$WHEELHOUSE" && mkdir -p "$WHEELHOUSE/deps" "$WHEELHOUSE/project" "$WHEEL_CACHE"
if [ -x "$(dirname "$PYTHON")/uv" ]; then
  "$(dirname "$PYTHON")/uv" build -q --wheel --out-dir "$WHEELHOUSE/project" .
else
  "$PYTHON" -m pip wheel -q --no-deps -w "$WHEELHOUSE/project" .
fi
project=$(ls "$WHEELHOUSE"/project/kafka_rlm_sidecar-*.whl)
deps() {  # every dependency wheel of the project with $EXTRAS into $WHEELHOUSE/deps
  "$PYTHON" -m pip wheel -q --no-index --find-links "$WHEEL_CACHE" --find-links "$WHEELHOUSE/project" \
    -w "$WHEELHOUSE/deps" "$project[$EXTRAS]"
}
# From the cache alone when it has them all (offline); else from the index, refilling the cache.
if ! deps 2>/dev/null; then
  say "fetching dependency wheels from the package index into $WHEEL_CACHE"
  "$PYTHON" -m pip wheel -q --find-links "$WHEELHOUSE/project" -w "$WHEEL_CACHE" "$project[$EXTRAS]"
  rm -f "$WHEEL_CACHE"/kafka_rlm_sidecar-*.whl
  deps
fi
rm -f "$WHEELHOUSE"/deps/kafka_rlm_sidecar-*.whl
say "$(ls "$WHEELHOUSE/deps" | wc -l) dependency wheels; building $TAG on $BASE with $RUNTIME"
# podman: the base is local (never ask a registry); docker format keeps the HEALTHCHECK (OCI drops it)
opts=(); [ "$RUNTIME" = podman ] && opts=(--pull=never --format docker)
"$RUNTIME" build "${opts[@]}" --build-arg "BASE=$BASE" -f deploy/docker/Dockerfile -t "$TAG" .
