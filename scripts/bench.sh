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
#   SECURE=off     off: the matrix above, plaintext, ACLs off.
#                  both: instead, the cost of security: one matrix row
#                  (claim mode, SECURE_CALLERS callers, SECURE_TARGET) run
#                  REPEAT times with mutual TLS and ACLs and REPEAT times in
#                  plaintext, alternating (plaintext first in odd rounds,
#                  secured first in even ones), each on a fresh cluster. The
#                  secured clusters get a CA and certificates from `claimd
#                  tls ca create` / `tls cert create`, servers run with
#                  -tls-* and -acl-enabled, `claimd acl bootstrap` makes the
#                  management token, and `claimd bench` gets a client
#                  certificate and that token (its simulated node then
#                  authenticates with its node secret, as an agent does).
#                  Written to docs/performance.md, section "Security cost
#                  (TLS + ACLs)" (its generated part: up to the next "##" or
#                  "###" heading). About 1 minute per run.
#   SECURE_CALLERS=64  SECURE_TARGET=leader
#   PPROF=1        SECURE=both only: serve pprof on every server
#                  (-debug-addr) and take a CPU profile of the target server
#                  during each run's measured window, kept in
#                  $TMP/runN/cpu.pprof (implies KEEP_TMP=1); see
#                  docs/performance.md for how to read them.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
CALLERS=${CALLERS:-1,16,64,256}
VOLUMES=${VOLUMES:-60000}
RELEASE_N=${RELEASE_N:-1000}
REPEAT=${REPEAT:-3}
OUT=${OUT:-docs/performance.md}
SECURE=${SECURE:-off}
SECURE_CALLERS=${SECURE_CALLERS:-64}
SECURE_TARGET=${SECURE_TARGET:-leader}
PPROF=${PPROF:-}
case "$SECURE" in
off | both) ;;
*)
	echo "bench.sh: SECURE=$SECURE: must be off or both" >&2
	exit 2
	;;
esac
if [[ -n "$PPROF" ]]; then KEEP_TMP=1; fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/claimd-bench.XXXXXX")
LOG_NAME=bench.sh
# shellcheck source=scripts/lib/cluster.sh
. scripts/lib/cluster.sh
on_exit_cleanup

LOAD_START=$(loadavg)
build_claimd

RESULTS="$TMP/results.jsonl"
: >"$RESULTS"
FAILED=0
# bench ARGS...: one invocation on a fresh cluster. A run leaves thousands
# of released claims for the leader to free (see the release figures); on a
# shared cluster that backlog would load the runs after it for minutes.
# With BENCH_SECURE=1 the cluster runs mutual TLS and ACLs and the tool
# gets the client certificate and the management token.
bench() {
	new_run_dir
	local dir=$RUN_DIR
	local secure=()
	if [[ -n "${BENCH_SECURE:-}" ]]; then
		start_cluster "$dir" secure
		secure=(-ca-cert "$CA_FILE" -client-cert "$CLIENT_CERT" -client-key "$CLIENT_KEY")
	else
		start_cluster "$dir"
	fi
	log "claimd bench $*${BENCH_SECURE:+ (TLS + ACLs)}"
	: >"$dir/bench.err"
	WATCHER=
	if [[ -n "$PPROF" ]]; then start_watch "$dir"; fi
	# The token goes by the environment, not the command line (ps shows
	# arguments to every user). The progress lines go to bench.err too,
	# where the watcher learns when the run starts and where it goes.
	if ! CLAIMD_TOKEN="${TOKEN:-}" "$CLAIMD" bench -address "$JOIN" -json -keep "${secure[@]}" "$@" \
		>"$dir/result.jsonl" 2> >(tee -a "$dir/bench.err" >&2); then
		FAILED=1
		log "run failed or saw errors: claimd bench $*"
	fi
	cat "$dir/result.jsonl" >>"$RESULTS"
	if [[ -n "$WATCHER" ]] && ! wait "$WATCHER"; then
		log "no CPU profile for run $RUN (see $dir/watch.err)"
	fi
	TOKEN=
	stop_cluster
	if [[ -z "${KEEP_TMP:-}" ]]; then rm -rf "$dir"; fi
}

machine_facts

# write_security_section: the generated part of "Security cost (TLS +
# ACLs)"; what is written below it under a "###" heading (the analysis of
# a run) is kept.
write_security_section() {
	local section="$TMP/security.md"
	{
		echo "## Security cost (TLS + ACLs)"
		echo
		echo "Written by \`SECURE=both scripts/bench.sh\`: one row of the claim matrix"
		echo "($SECURE_CALLERS callers, claim mode, target $SECURE_TARGET) run $REPEAT times on a"
		echo "three-server cluster with mutual TLS and ACLs and $REPEAT times in plaintext with"
		echo "ACLs off, alternating (plaintext first in odd rounds, secured first in even"
		echo "ones), each run on a fresh cluster. Secured: CA and certificates from \`claimd"
		echo "tls ca create\` / \`tls cert create -server|-client|-cli\`, servers with"
		echo "\`-tls-ca-file -tls-cert-file -tls-key-file -acl-enabled\` (TLS 1.3 on every"
		echo "connection, Raft included), the management token from \`claimd acl"
		echo "bootstrap\`. \`claimd bench\` gets the client certificate and that token; its"
		echo "simulated node registers with the token once, then sends its node secret"
		echo "with every call, and the callers claim and release with that secret, so"
		echo "the servers check the node's identity on every claim as for a real agent."
		echo "In plaintext the callers send the same secret, and the servers do not"
		echo "check it. The machine is shared and noisy: compare the ratio within a run,"
		echo "not figures across runs."
		echo
		echo "- machine: $(nproc) cores ($CPU), $MEM memory, Linux $(uname -r)"
		echo "- commit: $COMMIT, $(date -u +%Y-%m-%d)"
		echo "- command: \`SECURE=both REPEAT=$REPEAT DURATION=$DURATION WARMUP=$WARMUP SECURE_CALLERS=$SECURE_CALLERS VOLUMES=$VOLUMES${PPROF:+ PPROF=1} scripts/bench.sh\`"
		echo "- load average (1, 5, 15 min) at the start: $LOAD_START; at the end: $(loadavg)"
		echo "- each run: $WARMUP warmup, then $DURATION measured; latency is each"
		echo "  \`Volume.Claim\` round trip (claims and releases) as the caller sees it"
		echo
		echo "$TABLES"
		if ((FAILED)); then
			echo
			echo "Some runs reported errors; see the errors column."
		fi
	} >"$section"
	replace_section '^## Security cost \(TLS \+ ACLs\)$' '^##(#)? ' "$section"
	if [[ "$OUT" != /dev/null ]]; then log "wrote section \"Security cost (TLS + ACLs)\" to $OUT"; fi
}

IFS=, read -r -a CALLER_LIST <<<"$CALLERS"
if [[ "$SECURE" == both ]]; then
	make_pki
	security_round() {
		for sec in "$@"; do
			BENCH_SECURE=$sec bench -mode claim -target "$SECURE_TARGET" -callers "$SECURE_CALLERS" \
				-volumes "$VOLUMES" -duration "$DURATION" -warmup "$WARMUP" -drain-timeout 0
		done
	}
	# Alternating order: a machine that slows down or speeds up across the
	# script weighs on both sides alike.
	for ((round = 1; round <= REPEAT; round++)); do
		if ((round % 2)); then security_round "" 1; else security_round 1 ""; fi
	done
	TABLES=$("$CLAIMD" bench -report "$RESULTS")
	echo "$TABLES"
	write_security_section
	exit "$FAILED"
fi

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
	echo "- load average (1, 5, 15 min) at the start: $LOAD_START; at the end: $(loadavg)"
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

# Replace the section if it exists (up to the next "## " heading), else
# append it.
replace_section '^## claimd bench \(issue 7\)$' '^## ' "$SECTION"
if [[ "$OUT" != /dev/null ]]; then log "wrote section \"claimd bench (issue 7)\" to $OUT"; fi
exit "$FAILED"
