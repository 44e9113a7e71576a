#!/usr/bin/env bash
# Before/after comparison of two claimd binaries on real three-server
# clusters: the same `claimd bench -mode claim` row run REPEAT times with
# each binary, alternating (A first in odd rounds, B first in even ones),
# every run on a fresh cluster (plaintext, production Raft timings, fsync
# on). For each run it prints the claim calls/s and the CPU the three
# server processes used (from /proc, over WATCH_SECONDS of the measured
# window) per 1,000 claim calls and the calls' p50 and p99 latency, then
# each side's medians and the ratios.
# CPU per call is the figure a shared machine disturbs least.
#
#   A=/tmp/claimd-old B=/tmp/claimd-new scripts/bench-ab.sh
#
# Environment (all optional but A and B):
#   REPEAT=4 CALLERS=64 TARGET=leader DURATION=10s WARMUP=1s VOLUMES=60000
#   WATCH_DELAY=2 WATCH_SECONDS=8
#   SERVER_ARGS=""   extra flags for every server of B (A gets SERVER_ARGS_A)
#   PPROF=1          serve pprof and keep a CPU profile of the target server
#                    of each run in $TMP/runN/cpu.pprof (keeps $TMP)
set -euo pipefail
cd "$(dirname "$0")/.."

: "${A:?A=path of the before binary}" "${B:?B=path of the after binary}"
REPEAT=${REPEAT:-4}
CALLERS=${CALLERS:-64}
TARGET=${TARGET:-leader}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
VOLUMES=${VOLUMES:-60000}
PPROF=${PPROF:-}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/claimd-ab.XXXXXX")
PIDS=()
log() { echo "bench-ab.sh: $*" >&2; }
stop_cluster() {
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	local deadline=$((SECONDS + 15))
	for pid in "${PIDS[@]}"; do
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	PIDS=()
}
cleanup() {
	stop_cluster
	if [[ -z "$PPROF" ]]; then rm -rf "$TMP"; else log "kept $TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Ports below the ephemeral range, so that no outgoing connection holds one.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
NEXT_PORT=$((10000 + RANDOM % 15000))
free_ports() {
	PORTS=()
	while ((${#PORTS[@]} < $1)); do
		if port_free "$NEXT_PORT"; then PORTS+=("$NEXT_PORT"); fi
		NEXT_PORT=$((NEXT_PORT + 1))
	done
}

cpu_ticks() {
	local pid total=0
	for pid in "$@"; do total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat"))); done
	echo "$total"
}

# run SIDE BINARY EXTRA_ARGS: one run on a fresh cluster; appends
# "side ops_per_sec all_cpu_s target_cpu_s wall_s p50_ms p99_ms" to $TMP/runs.
RUN=0
run() {
	local side=$1 bin=$2 extra=$3
	RUN=$((RUN + 1))
	local dir="$TMP/run$RUN"
	mkdir -p "$dir"
	free_ports 6
	local addrs=() dbg=()
	for p in "${PORTS[@]:0:3}"; do addrs+=("127.0.0.1:$p"); done
	for p in "${PORTS[@]:3:3}"; do dbg+=("127.0.0.1:$p"); done
	local join
	join=$(IFS=,; echo "${addrs[*]}")
	PIDS=()
	for i in 0 1 2; do
		local d=()
		if [[ -n "$PPROF" ]]; then d=(-debug-addr "${dbg[$i]}"); fi
		# shellcheck disable=SC2086 # extra is a list of flags
		"$bin" agent -server -bootstrap-expect 3 -join "$join" -bind "${addrs[$i]}" -http-addr off \
			-data-dir "$dir/s$i" -node-name "s$i" "${d[@]}" $extra >"$dir/s$i.log" 2>&1 &
		PIDS+=($!)
	done
	local deadline=$((SECONDS + 60))
	until "$bin" operator raft list-peers -address "$join" -timeout 2s 2>/dev/null | grep -q leader; do
		if ((SECONDS > deadline)); then
			log "no leader after 60 s"
			tail -n 20 "$dir"/s*.log >&2
			exit 1
		fi
		sleep 0.5
	done
	: >"$dir/bench.err"
	(
		addr=
		for _ in $(seq 1 600); do
			addr=$(sed -n 's/^run: .*(\(127\.0\.0\.1:[0-9]*\)).*/\1/p' "$dir/bench.err" | head -n 1)
			[[ -n "$addr" ]] && break
			sleep 0.2
		done
		t=0
		for i in 0 1 2; do if [[ "${addrs[$i]}" == "$addr" ]]; then t=$i; fi; done
		sleep "${WATCH_DELAY:-2}"
		t0=$(date +%s.%N) a0=$(cpu_ticks "${PIDS[@]}") l0=$(cpu_ticks "${PIDS[$t]}")
		if [[ -n "$PPROF" ]]; then
			curl -sf -o "$dir/cpu.pprof" "http://${dbg[$t]}/debug/pprof/profile?seconds=${WATCH_SECONDS:-8}"
		else
			sleep "${WATCH_SECONDS:-8}"
		fi
		t1=$(date +%s.%N) a1=$(cpu_ticks "${PIDS[@]}") l1=$(cpu_ticks "${PIDS[$t]}")
		hz=$(getconf CLK_TCK)
		awk -v a=$((a1 - a0)) -v l=$((l1 - l0)) -v hz="$hz" -v t0="$t0" -v t1="$t1" \
			'BEGIN { printf "%.2f %.2f %.2f\n", a / hz, l / hz, t1 - t0 }' >"$dir/cpu.txt"
	) 2>"$dir/watch.err" &
	local watcher=$!
	"$B" bench -address "$join" -json -mode claim -target "$TARGET" -callers "$CALLERS" -volumes "$VOLUMES" \
		-duration "$DURATION" -warmup "$WARMUP" -drain-timeout 0 >"$dir/result.jsonl" 2>>"$dir/bench.err" ||
		log "run $RUN ($side) failed or saw errors"
	wait "$watcher" || true
	local ops p50 p99
	ops=$(grep -o '"ops_per_sec":[0-9.e+-]*' "$dir/result.jsonl" | head -n 1 | cut -d: -f2)
	p50=$(grep -o '"p50_ms":[0-9.e+-]*' "$dir/result.jsonl" | head -n 1 | cut -d: -f2)
	p99=$(grep -o '"p99_ms":[0-9.e+-]*' "$dir/result.jsonl" | head -n 1 | cut -d: -f2)
	echo "$side ${ops:-0} $(cat "$dir/cpu.txt" 2>/dev/null || echo '0 0 0') ${p50:-0} ${p99:-0}" | tee -a "$TMP/runs" >&2
	stop_cluster
}

log "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((round = 1; round <= REPEAT; round++)); do
	if ((round % 2)); then
		run A "$A" "${SERVER_ARGS_A:-}"
		run B "$B" "${SERVER_ARGS:-}"
	else
		run B "$B" "${SERVER_ARGS:-}"
		run A "$A" "${SERVER_ARGS_A:-}"
	fi
done
log "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "| run | side | claim calls/s | all servers ms / 1k calls | target ms / 1k calls | p50 ms | p99 ms |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"
awk '
	function median(a, n,    i, j, t) {
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	{
		calls = $2 * $5
		if (calls <= 0) next
		all = 1e6 * $3 / calls; t = 1e6 * $4 / calls
		printf "| %d | %s | %.0f | %.0f | %.0f | %.2f | %.2f |\n", NR, $1, $2, all, t, $6, $7
		n[$1]++; ops[$1, n[$1]] = $2; am[$1, n[$1]] = all; tm[$1, n[$1]] = t; p5[$1, n[$1]] = $6; p9[$1, n[$1]] = $7
	}
	END {
		for (s in n) {
			delete x; delete y; delete z; delete u; delete w
			for (i = 1; i <= n[s]; i++) { x[i] = ops[s, i]; y[i] = am[s, i]; z[i] = tm[s, i]; u[i] = p5[s, i]; w[i] = p9[s, i] }
			mo[s] = median(x, n[s]); ma[s] = median(y, n[s]); mt[s] = median(z, n[s]); m5[s] = median(u, n[s]); m9[s] = median(w, n[s])
		}
		printf "\nmedians: A %.0f calls/s, %.0f ms (all) / %.0f ms (target) per 1k calls, p50 %.2f ms, p99 %.2f ms; B %.0f calls/s, %.0f / %.0f ms, p50 %.2f, p99 %.2f\n", mo["A"], ma["A"], mt["A"], m5["A"], m9["A"], mo["B"], ma["B"], mt["B"], m5["B"], m9["B"]
		if (mo["A"] > 0 && ma["A"] > 0)
			printf "B/A: throughput %.2f, all servers CPU per call %.2f, target CPU per call %.2f\n", mo["B"] / mo["A"], ma["B"] / ma["A"], mt["B"] / mt["A"]
	}' "$TMP/runs"
