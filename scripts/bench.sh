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

# make_pki: a CA and a server, a client and a cli certificate in $TMP/pki,
# made by the binary as an operator would; sets the *_CERT/*_KEY names.
make_pki() {
	local d="$TMP/pki"
	mkdir -p "$d"
	(
		cd "$d"
		"$CLAIMD" tls ca create >/dev/null
		for role in server client cli; do "$CLAIMD" tls cert create "-$role" >/dev/null; done
	)
	CA_FILE="$d/claimd-agent-ca.pem"
	SERVER_CERT="$d/global-server-claimd.pem" SERVER_KEY="$d/global-server-claimd-key.pem"
	CLIENT_CERT="$d/global-client-claimd.pem" CLIENT_KEY="$d/global-client-claimd-key.pem"
	CLI_CERT="$d/global-cli-claimd.pem" CLI_KEY="$d/global-cli-claimd-key.pem"
}

# start_cluster DIR [secure]: three servers with data under DIR; sets JOIN
# and DEBUG_ADDRS (PPROF). With "secure" the servers run mutual TLS and
# ACLs, and TOKEN is the management token from `claimd acl bootstrap`
# (which also shows a leader was elected).
start_cluster() {
	local dir=$1 secure=${2:-}
	free_ports
	local addrs=()
	for p in "${PORTS[@]}"; do addrs+=("127.0.0.1:$p"); done
	JOIN=$(IFS=,; echo "${addrs[*]}")
	local extra=()
	if [[ -n "$secure" ]]; then
		extra=(-tls-ca-file "$CA_FILE" -tls-cert-file "$SERVER_CERT" -tls-key-file "$SERVER_KEY" -acl-enabled)
	fi
	DEBUG_ADDRS=()
	if [[ -n "$PPROF" ]]; then
		local saved=("${PORTS[@]}")
		free_ports
		for p in "${PORTS[@]}"; do DEBUG_ADDRS+=("127.0.0.1:$p"); done
		PORTS=("${saved[@]}")
	fi
	log "starting three servers on $JOIN (data under $dir${secure:+; mutual TLS and ACLs})"
	PIDS=()
	for i in 0 1 2; do
		local name="s$((i + 1))"
		local debug=()
		if [[ -n "$PPROF" ]]; then debug=(-debug-addr "${DEBUG_ADDRS[$i]}"); fi
		"$CLAIMD" agent -server -bootstrap-expect 3 -join "$JOIN" -bind "${addrs[$i]}" -http-addr off \
			-data-dir "$dir/$name" -node-name "$name" "${extra[@]}" "${debug[@]}" >"$dir/$name.log" 2>&1 &
		PIDS+=($!)
	done
	local deadline=$((SECONDS + 60))
	if [[ -n "$secure" ]]; then
		# Bootstrap fails (no leader) until a leader is elected.
		TOKEN=
		until TOKEN=$("$CLAIMD" acl bootstrap -address "$JOIN" -timeout 5s -ca-cert "$CA_FILE" \
			-client-cert "$CLI_CERT" -client-key "$CLI_KEY" 2>"$dir/bootstrap.err" |
			awk -F'= ' '/^Secret ID/ { print $2 }') && [[ -n "$TOKEN" ]]; do
			if ((SECONDS > deadline)); then
				log "no ACL bootstrap after 60 s: $(cat "$dir/bootstrap.err"); server logs:"
				tail -n 20 "$dir"/s*.log >&2
				exit 1
			fi
			sleep 0.5
		done
		return
	fi
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
# SECURE=both: one line per run, "run security ops_per_sec target_cpu_s all_cpu_s wall_s".
CPU_LOG="$TMP/cpu.log"
: >"$CPU_LOG"
FAILED=0
RUN=0
# bench ARGS...: one invocation on a fresh cluster. A run leaves thousands
# of released claims for the leader to free (see the release figures); on a
# shared cluster that backlog would load the runs after it for minutes.
# With BENCH_SECURE=1 the cluster runs mutual TLS and ACLs and the tool
# gets the client certificate and the management token.
bench() {
	RUN=$((RUN + 1))
	local dir="$TMP/run$RUN"
	mkdir -p "$dir"
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
	if [[ "$SECURE" == both ]]; then start_watch "$dir"; fi
	# The token goes by the environment, not the command line (ps shows
	# arguments to every user). The progress lines go to bench.err too,
	# where the watcher learns when the run starts and where it goes.
	if ! CLAIMD_TOKEN="${TOKEN:-}" "$CLAIMD" bench -address "$JOIN" -json -keep "${secure[@]}" "$@" \
		>"$dir/result.jsonl" 2> >(tee -a "$dir/bench.err" >&2); then
		FAILED=1
		log "run failed or saw errors: claimd bench $*"
	fi
	cat "$dir/result.jsonl" >>"$RESULTS"
	if [[ -n "$WATCHER" ]]; then
		local ops
		ops=$(grep -o '"ops_per_sec":[0-9.e+-]*' "$dir/result.jsonl" | head -n 1 | cut -d: -f2)
		if wait "$WATCHER" && [[ -n "$ops" ]]; then
			local sec=plaintext
			if [[ -n "${BENCH_SECURE:-}" ]]; then sec=tls+acl; fi
			echo "$RUN $sec $ops $(cat "$dir/cpu.txt")" >>"$CPU_LOG"
		else
			log "no CPU figures for run $RUN (see $dir/watch.err)"
		fi
	fi
	TOKEN=
	stop_cluster
	if [[ -z "${KEEP_TMP:-}" ]]; then rm -rf "$dir"; fi
}

# cpu_ticks PID...: user+system CPU ticks used so far by the processes.
cpu_ticks() {
	local pid total=0
	for pid in "$@"; do
		total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
	done
	echo "$total"
}

# start_watch DIR: in the background (pid in WATCHER), measure the
# servers over the run's measured window: it waits for the tool's "run:
# ..." line, which names the server the calls go to, then WATCH_DELAY (2
# s: the callers' sessions and the 1 s warmup), and for WATCH_SECONDS (8 s
# of the 10 s window) counts the CPU time the servers use (the target
# alone and all three), written to DIR/cpu.txt as "target_s all_s wall_s";
# with PPROF it takes a CPU profile of the target meanwhile (DIR/cpu.pprof).
# CPU time per call is what the noisy machine disturbs least: a server
# starved by other processes does fewer calls per second, but each costs
# about the same.
start_watch() {
	local dir=$1
	(
		addr=
		for _ in $(seq 1 600); do
			addr=$(sed -n 's/^run: .*(\(127\.0\.0\.1:[0-9]*\)).*/\1/p' "$dir/bench.err" | head -n 1)
			[[ -n "$addr" ]] && break
			sleep 0.2
		done
		[[ -n "$addr" ]] || exit 1
		IFS=, read -r -a servers <<<"$JOIN"
		target=
		for i in 0 1 2; do
			if [[ "${servers[$i]}" == "$addr" ]]; then target=$i; fi
		done
		[[ -n "$target" ]] || exit 1
		sleep "${WATCH_DELAY:-2}"
		t0=$(date +%s.%N) l0=$(cpu_ticks "${PIDS[$target]}") a0=$(cpu_ticks "${PIDS[@]}")
		if [[ -n "$PPROF" ]]; then
			curl -sf -o "$dir/cpu.pprof" "http://${DEBUG_ADDRS[$target]}/debug/pprof/profile?seconds=${WATCH_SECONDS:-8}"
		else
			sleep "${WATCH_SECONDS:-8}"
		fi
		t1=$(date +%s.%N) l1=$(cpu_ticks "${PIDS[$target]}") a1=$(cpu_ticks "${PIDS[@]}")
		hz=$(getconf CLK_TCK)
		awk -v l=$((l1 - l0)) -v a=$((a1 - a0)) -v hz="$hz" -v t0="$t0" -v t1="$t1" \
			'BEGIN { printf "%.2f %.2f %.2f\n", l / hz, a / hz, t1 - t0 }' >"$dir/cpu.txt"
	) >/dev/null 2>"$dir/watch.err" &
	WATCHER=$!
}

# cpu_table: per run, claim calls/s (the tool's, over its window) and the
# servers' CPU per 1,000 calls over the watched part of it; then each
# side's median and the ratio of the medians.
cpu_table() {
	echo "Server CPU per call, over ${WATCH_SECONDS:-8} s of each measured window (CPU ms per 1,000 claim calls: the target server alone, and all three servers; target CPU is the target's share of one core):"
	echo
	echo "| run | security | claim calls/s | target CPU | target ms / 1k calls | all servers ms / 1k calls |"
	echo "| ---: | --- | ---: | ---: | ---: | ---: |"
	# Fields: run security ops/s target_cpu_s all_cpu_s wall_s.
	awk '
		function median(a, n,    i, j, t) {
			for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
			return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
		}
		{
			calls = $3 * $6
			if (calls <= 0) next
			t = 1e6 * $4 / calls; all = 1e6 * $5 / calls
			printf "| %d | %s | %.0f | %.0f%% | %.0f | %.0f |\n", $1, $2, $3, 100 * $4 / $6, t, all
			n[$2]++; tm[$2, n[$2]] = t; am[$2, n[$2]] = all
		}
		END {
			if (!n["plaintext"] || !n["tls+acl"]) exit
			for (s in n) {
				delete x; delete y
				for (i = 1; i <= n[s]; i++) { x[i] = tm[s, i]; y[i] = am[s, i] }
				mt[s] = median(x, n[s]); ma[s] = median(y, n[s])
			}
			printf "\nMedian CPU per 1,000 claim calls: target %.0f ms plaintext, %.0f ms tls+acl (ratio %.2f); all servers %.0f ms plaintext, %.0f ms tls+acl (ratio %.2f).\n",
				mt["plaintext"], mt["tls+acl"], mt["tls+acl"] / mt["plaintext"], ma["plaintext"], ma["tls+acl"], ma["tls+acl"] / ma["plaintext"]
		}
	' "$CPU_LOG"
}

MEM=$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
CPU=$(awk -F: '/model name/ { sub(/^ +/, "", $2); print $2; exit }' /proc/cpuinfo)
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then COMMIT="$COMMIT+ (uncommitted changes)"; fi

# replace_section HEADING_RE END_RE FILE: put FILE in $OUT in place of the
# lines from the heading matching HEADING_RE up to (not including) the next
# line matching END_RE, or append it when there is no such heading.
replace_section() {
	local heading=$1 end=$2 section=$3
	if [[ "$OUT" == /dev/null ]]; then return; fi
	# The patterns go by the environment: awk -v would take their
	# backslashes as escapes.
	SECTION_FILE=$section HEADING_RE=$heading END_RE=$end awk '
		function emit() { while ((getline line < ENVIRON["SECTION_FILE"]) > 0) print line; close(ENVIRON["SECTION_FILE"]) }
		$0 ~ ENVIRON["HEADING_RE"] { emit(); skip = 1; done = 1; next }
		skip && $0 ~ ENVIRON["END_RE"] { skip = 0; print "" }
		!skip { print }
		END { if (!done) { print ""; emit() } }
	' "$OUT" >"$TMP/out.md"
	cp "$TMP/out.md" "$OUT"
}

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
		echo "- load average (1, 5, 15 min) at the start: $LOAD_START; at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
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
	TABLES+=$'\n\n'$(cpu_table)
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

# Replace the section if it exists (up to the next "## " heading), else
# append it.
replace_section '^## claimd bench \(issue 7\)$' '^## ' "$SECTION"
if [[ "$OUT" != /dev/null ]]; then log "wrote section \"claimd bench (issue 7)\" to $OUT"; fi
exit "$FAILED"
