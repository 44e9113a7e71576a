#!/usr/bin/env bash
# Issue 20 item 5: claimd at scale, with real server processes. Three
# `claimd agent -server` processes on loopback (as scripts/bench.sh starts
# them), then `claimd bench -mode scale`: NODES simulated client nodes
# (each its own node secret and heartbeat at the servers' TTL; they share
# a few sessions) and VOLUMES volumes each claimed by an alloc on one of
# them. Then, the nodes heartbeating throughout:
#
#   idle      each server's CPU (share of one core) and RSS over IDLE
#   snapshot  `claimd operator snapshot save` and `restore` of that state,
#             each timed, with the archive's size
#   takeover  the tool kills the leader (SIGKILL) and times the new one
#             until a claim is served and the heartbeats held through the
#             election are answered; nodes marked down are counted by the
#             tool (node list) and from the servers' logs ("marking it
#             down")
#
# With PPROF=1 the servers serve pprof (-debug-addr) and the leader's CPU
# profile over the idle window is kept ($TMP/idle-leader.pprof, with its
# top functions printed), and one over the first RESTORE_PROFILE_SECONDS
# (10) of the snapshot restore ($TMP/restore-leader.pprof), and of the two
# other servers over the first TAKEOVER_PROFILE_SECONDS (15) after the
# kill ($TMP/takeover-sN.pprof). Everything stops by itself; the servers are
# stopped and the temporary directory removed on exit (KEEP_TMP=1 keeps
# it). Results go to docs/performance.md, section "Scale (issue 20)" (its
# generated part, up to the next "##" or "###" heading). About 5 minutes
# with the defaults.
#
# Environment (all optional):
#   NODES=5000 VOLUMES=100000 CALLERS=64 (claimers and registrations at once)
#   SETTLE=10s IDLE=30s
#   OUT=docs/performance.md   (OUT=/dev/null: print only)
#   KEEP_TMP=1 PPROF=1
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=${NODES:-5000}
VOLUMES=${VOLUMES:-100000}
CALLERS=${CALLERS:-64}
SETTLE=${SETTLE:-10s}
IDLE=${IDLE:-30s}
OUT=${OUT:-docs/performance.md}
PPROF=${PPROF:-}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/claimd-scale.XXXXXX")
LOG_NAME=bench-scale.sh
# shellcheck source=scripts/lib/cluster.sh
. scripts/lib/cluster.sh
BENCH_PID=
cleanup_extra() { if [[ -n "$BENCH_PID" ]]; then stop_pids "$BENCH_PID"; fi; }
on_exit_cleanup

LOAD_START=$(loadavg)
build_claimd
machine_facts
DIR="$TMP/cluster"
mkdir -p "$DIR"
start_cluster "$DIR"

PAUSE="$TMP/resume"
log "claimd bench -mode scale: $NODES nodes, $VOLUMES volumes"
"$CLAIMD" bench -address "$JOIN" -json -keep -mode scale -nodes "$NODES" -volumes "$VOLUMES" -callers "$CALLERS" \
	-settle "$SETTLE" -idle "$IDLE" -takeover -pause-file "$PAUSE" >"$TMP/result.json" 2> >(tee "$TMP/bench.err" >&2) &
BENCH_PID=$!

# wait_line PATTERN: wait (as long as the tool runs) for a progress line.
wait_line() {
	until grep -q "$1" "$TMP/bench.err" 2>/dev/null; do
		if ! kill -0 "$BENCH_PID" 2>/dev/null; then
			log "claimd bench ended before \"$1\""
			wait "$BENCH_PID" || true
			BENCH_PID=
			exit 1
		fi
		sleep 0.2
	done
}

# profile_leader FILE SECONDS: with PPROF, a CPU profile of the leader
# named in the tool's idle line.
LEADER_DEBUG=
profile_leader() {
	if [[ -z "$LEADER_DEBUG" ]]; then return; fi
	log "profiling the leader for $2 s ($1)"
	curl -sf -o "$TMP/$1" "http://$LEADER_DEBUG/debug/pprof/profile?seconds=$2" || log "no profile $1"
}

# The idle window: with PPROF, the leader's CPU profile over it.
wait_line '^idle: measuring'
if [[ -n "$PPROF" ]]; then
	leader=$(sed -n 's/^idle: .*(leader \(127\.0\.0\.1:[0-9]*\)).*/\1/p' "$TMP/bench.err" | head -n 1)
	for i in 0 1 2; do
		if [[ "${ADDRS[$i]}" == "$leader" ]]; then LEADER_DEBUG=${DEBUG_ADDRS[$i]}; fi
	done
	profile_leader idle-leader.pprof "$(awk -v d="${IDLE%s}" 'BEGIN { s = int(d) - 2; if (s < 1) s = 1; print s }')"
fi

# Snapshot save and restore of the loaded cluster, the nodes heartbeating.
# A failure is recorded and the run goes on to the takeover.
wait_line '^paused:'
timed() { # OUTFILE CMD...: run CMD, print its seconds or "failed: ..."
	local out=$1 t0 t1
	shift
	t0=$(date +%s.%N)
	if "$@" >"$out" 2>&1; then
		t1=$(date +%s.%N)
		awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f s", b - a }'
	else
		echo "failed ($(tail -n 1 "$out"))"
	fi
}
SAVE_S=$(timed "$TMP/save.out" "$CLAIMD" operator snapshot save -address "$JOIN" "$TMP/scale.snap")
SNAP_MIB=0
RESTORE_S="not tried (no archive)"
if [[ -s "$TMP/scale.snap" ]]; then
	SNAP_MIB=$(awk -v b="$(stat -c %s "$TMP/scale.snap")" 'BEGIN { printf "%.1f", b / 1048576 }')
	PROFILER=
	if [[ -n "$PPROF" ]]; then
		profile_leader restore-leader.pprof "${RESTORE_PROFILE_SECONDS:-10}" &
		PROFILER=$!
	fi
	RESTORE_S=$(timed "$TMP/restore.out" "$CLAIMD" operator snapshot restore -address "$JOIN" "$TMP/scale.snap")
	if [[ -n "$PROFILER" ]]; then wait "$PROFILER" || true; fi
fi
log "snapshot: save $SAVE_S, restore $RESTORE_S, archive $SNAP_MIB MiB"
touch "$PAUSE"

# With PPROF: CPU profiles of the two servers left (one becomes the new
# leader) over the takeover's first TAKEOVER_PROFILE_SECONDS (15).
TAKEOVER_PROFILERS=()
if [[ -n "$PPROF" ]]; then
	wait_line '^takeover: killing'
	killed=$(sed -n 's/^takeover: killing the leader \(127\.0\.0\.1:[0-9]*\) .*/\1/p' "$TMP/bench.err" | head -n 1)
	for i in 0 1 2; do
		if [[ "${ADDRS[$i]}" != "$killed" ]]; then
			curl -sf -o "$TMP/takeover-s$((i + 1)).pprof" \
				"http://${DEBUG_ADDRS[$i]}/debug/pprof/profile?seconds=${TAKEOVER_PROFILE_SECONDS:-15}" &
			TAKEOVER_PROFILERS+=($!)
		fi
	done
fi

# Nodes marked down, from the servers' logs, counted when the tool's
# takeover watch ends: once the tool exits its nodes stop heartbeating, and
# the servers mark them all down a TTL later (as they should).
wait_line '^takeover: watched'
for p in "${TAKEOVER_PROFILERS[@]}"; do wait "$p" || true; done
DOWN_LOGGED=$(cat "$DIR"/s*.log | grep -c 'marking it down' || true)

FAILED=0
if ! wait "$BENCH_PID"; then
	FAILED=1
	log "claimd bench failed or saw errors"
fi
BENCH_PID=
LOAD_END=$(loadavg)

TABLES=$("$CLAIMD" bench -report "$TMP/result.json")
PROFILE_TOP=
if [[ -s "$TMP/idle-leader.pprof" ]]; then
	PROFILE_TOP=$(go tool pprof -top -nodecount=20 "$CLAIMD" "$TMP/idle-leader.pprof" 2>/dev/null | sed -n '1,30p')
	KEEP_TMP=1
fi
echo
echo "$TABLES"
echo
echo "Snapshot of that state: save $SAVE_S, restore $RESTORE_S, archive $SNAP_MIB MiB."
echo "Server log lines \"marking it down\" until the end of the takeover watch: $DOWN_LOGGED"
if [[ -n "$PROFILE_TOP" ]]; then
	echo
	echo "$PROFILE_TOP"
fi
for f in "$TMP"/takeover-s*.pprof; do
	[[ -s "$f" ]] || continue
	echo
	echo "$(basename "$f" .pprof) over the takeover's first ${TAKEOVER_PROFILE_SECONDS:-15} s, cumulative:"
	go tool pprof -top -cum -nodecount=30 "$CLAIMD" "$f" 2>/dev/null | sed -n '1,40p'
done
if [[ -s "$TMP/restore-leader.pprof" ]]; then
	echo
	echo "The leader during the restore (first ${RESTORE_PROFILE_SECONDS:-10} s), cumulative:"
	go tool pprof -top -cum -nodecount=40 "$CLAIMD" "$TMP/restore-leader.pprof" 2>/dev/null | sed -n '1,50p'
fi

SECTION="$TMP/section.md"
{
	echo "## Scale (issue 20)"
	echo
	echo "Written by \`scripts/bench-scale.sh\`: three \`claimd agent -server\` processes on"
	echo "loopback (production Raft timings, fsync on, default heartbeat TTL), and"
	echo "\`claimd bench -mode scale\`: $NODES simulated client nodes, each with its own"
	echo "node secret, registered and heartbeating every third of the TTL the"
	echo "servers hand out (as agents do), sharing one session per 100 nodes spread"
	echo "over the servers; $VOLUMES volumes, each claimed by an alloc on one node"
	echo "(with that node's secret). Then, the nodes heartbeating all along: $SETTLE"
	echo "to settle, each server's CPU and RSS over $IDLE with nothing but"
	echo "heartbeats; \`claimd operator snapshot save\` and \`restore\` of that state;"
	echo "then the tool kills the leader (SIGKILL) and times the takeover from the"
	echo "kill: a new leader named, a claim served through a surviving server, that"
	echo "claim released and freed (the release watcher runs), the heartbeats sent"
	echo "between the kill and the new leader (the servers hold them while there is"
	echo "no leader) answered, and every node heartbeating again (at least one"
	echo "heartbeat interval, a third of the TTL, by construction). The takeover"
	echo "figure is the later of the claim served and the held heartbeats answered;"
	echo "the new leader's heartbeat timers then run. Nodes marked down are counted"
	echo "from the node list (polled once a second for two TTLs and 5 s after the"
	echo "kill) and from the servers' logs. Plaintext, ACLs off."
	echo
	echo "- machine: $(nproc) cores ($CPU), $MEM memory, Linux $(uname -r)"
	echo "- commit: $COMMIT, $(date -u +%Y-%m-%d)"
	echo "- command: \`NODES=$NODES VOLUMES=$VOLUMES CALLERS=$CALLERS SETTLE=$SETTLE IDLE=$IDLE${PPROF:+ PPROF=1} scripts/bench-scale.sh\`"
	echo "- load average (1, 5, 15 min) at the start: $LOAD_START; at the end: $LOAD_END"
	echo
	echo "$TABLES"
	echo
	echo "Snapshot of that state: \`claimd operator snapshot save\` $SAVE_S, \`restore\` $RESTORE_S (archive $SNAP_MIB MiB, gzipped)."
	echo "Server log lines \"node missed its heartbeat; marking it down\" from the start until the end of the takeover watch: $DOWN_LOGGED."
	if ((FAILED)); then
		echo
		echo "The tool reported errors; see its output."
	fi
} >"$SECTION"
replace_section '^## Scale \(issue 20\)$' '^##(#)? ' "$SECTION"
if [[ "$OUT" != /dev/null ]]; then log "wrote section \"Scale (issue 20)\" to $OUT"; fi
exit "$FAILED"
