#!/bin/sh
# Builds the container image localhost/tidebus:latest (docker format, so the HEALTHCHECK is
# kept) from a tidebus binary built here, without a registry: the Containerfile's final stage
# over a root filesystem of the binary and the shared libraries it loads (rootfs.sh).
# Usage: config/container/build.sh [BINARY]   (default target/release/tidebus)
# Uses podman, else docker buildx. On hosts whose limits podman's defaults exceed, point
# CONTAINERS_CONF at config/container/containers.conf.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
binary=${1:-target/release/tidebus}
tag=${TIDEBUS_IMAGE:-localhost/tidebus:latest}
[ -x "$binary" ] || { echo "build.sh: no binary at $binary (cargo build --release)" >&2; exit 2; }
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
sh "$here/rootfs.sh" "$binary" "$context/rootfs"
if command -v podman >/dev/null 2>&1; then
  podman build --quiet --format docker --build-context "build=$context" -t "$tag" \
    -f "$here/Containerfile" "$context"
else
  docker buildx build --load --build-context "build=$context" -t "$tag" \
    -f "$here/Containerfile" "$context"
fi
echo "built $tag"
