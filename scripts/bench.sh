#!/usr/bin/env bash
# Issue 7's standard benchmark matrix. Builds claimd and runs `claimd
# bench` against three-server clusters on loopback (three `claimd agent
# -server -bootstrap-expect 3` processes, production Raft timings, fsync
# on: the defaults):
#
#   claim     1, 16, 64 and 256 callers, to the leader and to a follower
#   contended 64 callers racing for 8 single-node-writer volumes
#   release   1,000 allocs stopped together
#
# Every invocation gets a fresh cluster, started and stopped around it, so
# that no run inherits the release backlog of the one before. The results
# go to docs/performance.md, section "claimd bench (issue 7)" (replaced
# when it exists; the other sections are kept). About 10 minutes with the
# defaults (4 with REPEAT=1).
#
# Environment (all optional):
#   DURATION=10s   measured time of each run (plus WARMUP)
#   WARMUP=1s
#   CALLERS=1,16,64,256
#   VOLUMES=60000  claim pool: each (alloc, volume) pair is used once per run
#   RELEASE_N=1000
#   REPEAT=3       rounds of the claim matrix; the table shows each row's
#                  median run and the range (this VM's run-to-run spread is
#                  ±10%, more than many a change being measured)
#   OUT=docs/performance.md   (OUT=/dev/null: print only)
#   KEEP_TMP=1     keep the temporary directory (server logs, raw JSON)
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
CALLERS=${CALLERS:-1,16,64,256}
VOLUMES=${VOLUMES:-60000}
RELEASE_N=${RELEASE_N:-1000}
REPEAT=${REPEAT:-3}
OUT=${OUT:-docs/performance.md}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/claimd-bench.XXXXXX")
PIDS=()
cleanup() {
	if declare -F stop_cluster >/dev/null; then stop_cluster; fi
	if [[ -z "${KEEP_TMP:-}" ]]; then
		rm -rf "$TMP"
	else
		echo "kept $TMP" >&2
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "bench.sh: $*" >&2; }

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
log "building claimd"
go build -o "$TMP/claimd" ./cmd/claimd
CLAIMD="$TMP/claimd"

# Three free loopback ports: nothing answers on them now. They are taken
# from below the kernel's ephemeral range: a port in that range can be the
# local end of some outgoing connection (one server's to another), which
# does not answer but still makes the next server's listen fail with
# "address already in use".
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
EPHEMERAL_LOW=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
PORT_SPAN=$((EPHEMERAL_LOW - 10000 - 1000))
((PORT_SPAN >= 1000)) || PORT_SPAN=1000
NEXT_PORT=$((10000 + RANDOM % PORT_SPAN))
free_ports() {
	PORTS=()
	while ((${#PORTS[@]} < 3)); do
		if port_free "$NEXT_PORT"; then PORTS+=("$NEXT_PORT"); fi
		NEXT_PORT=$((NEXT_PORT + 1))
	done
}

# start_cluster DIR: three servers with data under DIR; sets JOIN.
start_cluster() {
	local dir=$1
	free_ports
	local addrs=()
	for p in "${PORTS[@]}"; do addrs+=("127.0.0.1:$p"); done
	JOIN=$(IFS=,; echo "${addrs[*]}")
	log "starting three servers on $JOIN (data under $dir)"
	PIDS=()
	for i in 0 1 2; do
		local name="s$((i + 1))"
		"$CLAIMD" agent -server -bootstrap-expect 3 -join "$JOIN" -bind "${addrs[$i]}" \
			-data-dir "$dir/$name" -node-name "$name" >"$dir/$name.log" 2>&1 &
		PIDS+=($!)
	done
	local deadline=$((SECONDS + 60))
	until "$CLAIMD" operator raft list-peers -address "$JOIN" -timeout 2s 2>/dev/null | grep -q leader; do
		if ((SECONDS > deadline)); then
			log "no leader after 60 s; server logs:"
			tail -n 20 "$dir"/s*.log >&2
			exit 1
		fi
		sleep 0.5
	done
}

# stop_cluster: SIGTERM, then SIGKILL what is still running after 15 s. A
# leader stopped together with its followers can hang in shutdown (a
# release worker waits on a Raft apply that can no longer commit); the
# data is thrown away anyway.
stop_cluster() {
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	local deadline=$((SECONDS + 15))
	for pid in "${PIDS[@]}"; do
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
		if kill -0 "$pid" 2>/dev/null; then
			log "server $pid did not stop within 15 s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
		wait "$pid" 2>/dev/null || true
	done
	PIDS=()
}

RESULTS="$TMP/results.jsonl"
: >"$RESULTS"
FAILED=0
RUN=0
# bench ARGS...: one invocation on a fresh cluster. A run leaves thousands
# of released claims for the leader to free (see the release figures); on a
# shared cluster that backlog would load the runs after it for minutes.
bench() {
	RUN=$((RUN + 1))
	local dir="$TMP/run$RUN"
	mkdir -p "$dir"
	start_cluster "$dir"
	log "claimd bench $*"
	if ! "$CLAIMD" bench -address "$JOIN" -json -keep "$@" >>"$RESULTS"; then
		FAILED=1
		log "run failed or saw errors: claimd bench $*"
	fi
	stop_cluster
	if [[ -z "${KEEP_TMP:-}" ]]; then rm -rf "$dir"; fi
}

IFS=, read -r -a CALLER_LIST <<<"$CALLERS"
# Rounds, not repeats in place: a slow spell of the machine then lands on
# every configuration of a round alike.
for ((round = 1; round <= REPEAT; round++)); do
	for c in "${CALLER_LIST[@]}"; do
		for target in leader follower; do
			bench -mode claim -target "$target" -callers "$c" -volumes "$VOLUMES" \
				-duration "$DURATION" -warmup "$WARMUP" -drain-timeout 0
		done
	done
done
bench -mode contended -target leader -callers 64 -volumes 8 -duration "$DURATION" -warmup "$WARMUP" -drain-timeout 60s
bench -mode release -target leader -volumes "$RELEASE_N"

TABLES=$("$CLAIMD" bench -report "$RESULTS")
echo "$TABLES"

# The section, with what the figures depend on.
MEM=$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
CPU=$(awk -F: '/model name/ { sub(/^ +/, "", $2); print $2; exit }' /proc/cpuinfo)
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then COMMIT="$COMMIT+ (uncommitted changes)"; fi
SECTION="$TMP/section.md"
{
	echo "## claimd bench (issue 7)"
	echo
	echo "Written by \`scripts/bench.sh\`: three \`claimd agent -server -bootstrap-expect 3\`"
	echo "processes on loopback, production Raft timings, fsync on (the default"
	echo "raft-boltdb store), the load generator on the same machine; a fresh cluster"
	echo "for every row, so that no run inherits the release backlog of the one"
	echo "before. Each caller has its own yamux session. \`claimd bench\` registers a"
	echo "simulated client node whose node plugin answers every node detach at once,"
	echo "so the figures are the servers' alone (a real CSI plugin adds its unmount"
	echo "time to each release)."
	echo
	echo "- machine: $(nproc) cores ($CPU), $MEM memory, Linux $(uname -r)"
	echo "- commit: $COMMIT, $(date -u +%Y-%m-%d)"
	echo "- command: \`DURATION=$DURATION WARMUP=$WARMUP CALLERS=$CALLERS VOLUMES=$VOLUMES RELEASE_N=$RELEASE_N REPEAT=$REPEAT scripts/bench.sh\`"
	echo "- load average (1, 5, 15 min) at the start: $LOAD_START; at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "- each run: $WARMUP warmup, then $DURATION measured; latency is each"
	echo "  \`Volume.Claim\` round trip (claims and releases) as the caller sees it;"
	echo "  the claim matrix ran $REPEAT rounds, each row is its median run"
	echo
	echo "$TABLES"
	if ((FAILED)); then
		echo
		echo "Some runs reported errors; see the errors columns."
	fi
} >"$SECTION"

if [[ "$OUT" != /dev/null ]]; then
	# Replace the section if it exists (up to the next "## " heading),
	# else append it.
	awk -v section="$SECTION" '
		function emit() { while ((getline line < section) > 0) print line; close(section) }
		/^## claimd bench \(issue 7\)$/ { emit(); skip = 1; done = 1; next }
		skip && /^## / { skip = 0; print "" }
		!skip { print }
		END { if (!done) { print ""; emit() } }
	' "$OUT" >"$TMP/out.md"
	cp "$TMP/out.md" "$OUT"
	log "wrote section \"claimd bench (issue 7)\" to $OUT"
fi
exit "$FAILED"
