#!/usr/bin/env bash
# Release archives, built from what git holds at a ref (a tag, for a
# release), never from the working tree:
#
#   scripts/release.sh v0.9.0
#
# writes dist/claimd_v0.9.0_linux_amd64.tar.gz, ..._linux_arm64.tar.gz and
# dist/SHA256SUMS. Each archive holds one directory, claimd_VERSION_linux_ARCH/,
# with the static binary (no cgo; the version and commit stamped, see
# package version), README.md and the docs/ directory beside it (so every
# link in them resolves inside the archive), the systemd units and the
# sample configuration directories (packaging/).
#
# The same ref gives the same bytes on any machine with the same Go
# toolchain: the source comes from `git archive`, the build is -trimpath
# without a build ID or VCS stamp, and tar and gzip record no times, owners
# or names of their own (every mtime is the commit's time).
#
# Environment (all optional):
#   OUT=dist              where the archives and SHA256SUMS go
#   ARCHES="amd64 arm64"  the linux architectures to build
#   VERSION               the version to stamp (default: the tag at the
#                         ref, else "dev"); letters, digits and . _ + - only
set -euo pipefail
cd "$(dirname "$0")/.."

REF=${1:-HEAD}
if [[ $# -gt 1 ]]; then
	echo "usage: scripts/release.sh [REF]" >&2
	exit 2
fi
COMMIT=$(git rev-parse --verify --quiet "$REF^{commit}") || {
	echo "release.sh: $REF is not a commit, tag or branch this repository has" >&2
	exit 1
}
VERSION=${VERSION:-$(git describe --tags --exact-match "$COMMIT" 2>/dev/null || echo dev)}
if [[ ! "$VERSION" =~ ^[A-Za-z0-9._+-]+$ ]]; then
	echo "release.sh: VERSION $VERSION: only letters, digits and . _ + - may appear in a file name" >&2
	exit 1
fi
OUT=$(realpath -m "${OUT:-dist}")
ARCHES=${ARCHES:-amd64 arm64}
EPOCH=$(git show -s --format=%ct "$COMMIT")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/claimd-release.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/src" "$WORK/stage" "$OUT"
git archive --format=tar "$COMMIT" | tar -x -C "$WORK/src"

log() { echo "release.sh: $*" >&2; }
log "claimd $VERSION from ${COMMIT:0:12} for linux/{${ARCHES// /,}} into $OUT"

archives=()
for arch in $ARCHES; do
	name=claimd_${VERSION}_linux_${arch}
	dir=$WORK/stage/$name
	mkdir -p "$dir/systemd" "$dir/config"
	(
		cd "$WORK/src"
		CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOFLAGS=-mod=readonly \
			go build -trimpath -buildvcs=false \
			-ldflags "-s -w -buildid= -X github.com/claimd/claimd/version.version=$VERSION -X github.com/claimd/claimd/version.commit=$COMMIT" \
			-o "$dir/claimd" ./cmd/claimd
	)
	cp "$WORK/src/README.md" "$dir/"
	cp -r "$WORK/src/docs" "$dir/docs"
	cp "$WORK/src"/packaging/systemd/*.service "$dir/systemd/"
	cp -r "$WORK/src/packaging/config/server" "$WORK/src/packaging/config/client" "$dir/config/"
	chmod -R u=rwX,go=rX "$dir"
	chmod 0755 "$dir/claimd"
	(cd "$WORK/stage" && tar --sort=name --mtime="@$EPOCH" --owner=0 --group=0 --numeric-owner \
		--format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
		-cf - "$name") | gzip -n -9 >"$OUT/$name.tar.gz"
	archives+=("$name.tar.gz")
	log "wrote $name.tar.gz"
done
(cd "$OUT" && sha256sum "${archives[@]}" >SHA256SUMS)
log "wrote SHA256SUMS"
