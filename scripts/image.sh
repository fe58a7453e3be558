#!/usr/bin/env bash
# image.sh — build the leasehold container image with podman, without network:
# a static binary (CGO_ENABLED=0) built here, on an empty base
# (deploy/container/Dockerfile). The image reference is the last line of
# stdout; progress goes to stderr.
#
#   img=$(bash scripts/image.sh | tail -n 1)
#   podman run --network host -v leasehold-data:/data "$img"
#
# Environment (optional): LEASEHOLD_IMAGE  the reference to tag (default
# localhost/leasehold:dev); VERSION, COMMIT  what `leasehold version` prints.
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${LEASEHOLD_IMAGE:-localhost/leasehold:dev}
version=${VERSION:-}
commit=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || true)}
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
CGO_ENABLED=0 go build -trimpath -buildvcs=false \
	-ldflags "-s -w -X github.com/leasehold/leasehold/internal/buildinfo.version=${version} -X github.com/leasehold/leasehold/internal/buildinfo.commit=${commit}" \
	-o "$ctx/leasehold" ./cmd/leasehold
mkdir "$ctx/data"
podman build --network none --pull=never -f deploy/container/Dockerfile -t "$ref" "$ctx" >&2
echo "$ref"
