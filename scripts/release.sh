#!/usr/bin/env bash
# release.sh — cross-build the release binaries: static (CGO_ENABLED=0),
# stripped, -trimpath, with the version and commit stamped through -ldflags,
# one per platform, into dist/, with a SHA256SUMS file beside them.
#
#   bash scripts/release.sh                  # dist/leasehold-v0.1.0-linux-amd64, …
#   cd dist && sha256sum -c SHA256SUMS
#
# Environment (optional):
#   VERSION    what `leasehold version` prints (default: the tag on HEAD when
#              there is exactly one, else internal/buildinfo.Release)
#   COMMIT     the commit it names (default: git rev-parse HEAD)
#   PLATFORMS  space-separated GOOS/GOARCH (default: linux/amd64 linux/arm64 darwin/arm64)
#   DIST       the output directory (default: dist); files of the same
#              version in it are replaced
# The file names are printed on stdout, SHA256SUMS last; progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
pkg=github.com/leasehold/leasehold/internal/buildinfo
version=${VERSION:-$(git describe --tags --exact-match HEAD 2>/dev/null || true)}
if [ -z "$version" ]; then
	version=$(sed -n 's/^const Release = "\(.*\)"$/\1/p' internal/buildinfo/buildinfo.go)
fi
case "$version" in
v[0-9]*) ;;
*) echo "release.sh: version \"$version\" is not a vX.Y.Z tag" >&2; exit 2 ;;
esac
commit=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
platforms=${PLATFORMS:-linux/amd64 linux/arm64 darwin/arm64}
dist=${DIST:-dist}
mkdir -p "$dist"
files=()
for p in $platforms; do
	os=${p%/*} arch=${p#*/}
	out="leasehold-$version-$os-$arch"
	echo "release.sh: building $out" >&2
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=false \
		-ldflags "-s -w -X $pkg.version=$version -X $pkg.commit=$commit" \
		-o "$dist/$out" ./cmd/leasehold
	files+=("$out")
	echo "$dist/$out"
done
(cd "$dist" && sha256sum "${files[@]}" > SHA256SUMS)
echo "$dist/SHA256SUMS"
