# shellcheck shell=bash
# Used by scripts/bench-vs-etcd.sh: build etcd programs from the Go module
# proxy into a cache directory outside this repository
# (${XDG_CACHE_HOME:-$HOME/.cache}/claimd-bench), once per version. Needs
# TMP (for the build log) and log() from scripts/lib/cluster.sh.

ETCD_BUILD_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/claimd-bench"

# go_proxy_build DIR MODULE@VERSION... -- OUTPUT=PACKAGE...: in DIR, a
# throwaway module that requires the given module versions, then each
# PACKAGE built to DIR/OUTPUT. A throwaway module because etcd's own
# go.mod files replace their sibling modules by relative paths, which do
# not apply to a dependency: as a requirement, the published versions of
# every etcd submodule are used, as etcd's release pins them. Exits with
# the build's last lines on failure.
go_proxy_build() {
	local dir=$1
	shift
	local mods=() builds=()
	while (($#)) && [[ "$1" != -- ]]; do mods+=("$1"); shift; done
	shift
	builds=("$@")
	mkdir -p "$dir"
	local buildlog
	buildlog="$TMP/build-$(basename "$dir").log"
	# Each step ends the subshell on failure: set -e does not apply inside
	# a command whose status is tested (the || below).
	(
		cd "$dir" || exit 1
		printf 'module claimdbenchetcd\n\ngo 1.24\n' >go.mod
		{
			printf '//go:build tools\n\npackage tools\n\nimport (\n'
			local b
			for b in "${builds[@]}"; do printf '\t_ "%s"\n' "${b#*=}"; done
			printf ')\n'
		} >tools.go
		GOFLAGS=-mod=mod go get "${mods[@]}" || exit 1
		for b in "${builds[@]}"; do GOFLAGS=-mod=mod go build -o "${b%%=*}" "${b#*=}" || exit 1; done
	) >"$buildlog" 2>&1 || {
		log "building in $dir failed:"
		tail -n 20 "$buildlog" >&2
		exit 1
	}
}

# build_etcd_benchmark VERSION: etcd's tools/benchmark at VERSION; sets
# ETCD_BENCHMARK to the binary's path.
build_etcd_benchmark() {
	local version=$1 dir="$ETCD_BUILD_CACHE/etcd-benchmark-$1"
	if [[ ! -x "$dir/benchmark" ]]; then
		log "building etcd's benchmark tool $version into $dir"
		go_proxy_build "$dir" "go.etcd.io/etcd/v3/tools/benchmark@$version" -- benchmark=go.etcd.io/etcd/v3/tools/benchmark
	fi
	# shellcheck disable=SC2034 # for the script that sources this file
	ETCD_BENCHMARK="$dir/benchmark"
}

# build_etcd_server VERSION: the etcd server and etcdctl of release VERSION
# (v3.5 and later: the server's main package is go.etcd.io/etcd/server/v3,
# etcdctl's go.etcd.io/etcd/etcdctl/v3, both tagged with the release) into
# $ETCD_BUILD_CACHE/etcd-VERSION; sets ETCD_SERVER and ETCDCTL to them.
# Built with the local Go toolchain, plain `go build`, the dependency
# versions etcd's go.mod files require: the sources of etcd's release
# binaries (which its own build script makes), reporting the same version
# without a Git SHA.
build_etcd_server() {
	local version=$1 dir="$ETCD_BUILD_CACHE/etcd-$1"
	if [[ ! -x "$dir/etcd" || ! -x "$dir/etcdctl" ]]; then
		log "building etcd $version (server and etcdctl) from the Go module proxy into $dir"
		go_proxy_build "$dir" "go.etcd.io/etcd/server/v3@$version" "go.etcd.io/etcd/etcdctl/v3@$version" -- \
			etcd=go.etcd.io/etcd/server/v3 etcdctl=go.etcd.io/etcd/etcdctl/v3
	fi
	# shellcheck disable=SC2034 # for the script that sources this file
	ETCD_SERVER="$dir/etcd" ETCDCTL="$dir/etcdctl"
}
