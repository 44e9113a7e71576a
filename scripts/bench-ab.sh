#!/usr/bin/env bash
# Before/after comparison of two claimd binaries on real three-server
# clusters: the same `claimd bench -mode claim` row run REPEAT times with
# each binary's servers, alternating (A first in odd rounds, B first in
# even ones), every run on a fresh cluster (scripts/lib/cluster.sh:
# plaintext, production Raft timings, fsync on). The load generator is
# always B's `claimd bench`, so only the servers differ; it also measures
# the servers' CPU time over the measured window (bench/cpu.go: the PIDs
# come from the servers' Status.Runtime). For each run this prints the
# claim calls/s, the CPU all three servers and the target server used per
# 1,000 claim calls and per claim cycle (a claim and its release), and the
# calls' p50 and p99 latency; then each side's medians and the B/A ratios.
# CPU per call is the figure a shared machine disturbs least.
#
#   A=/tmp/claimd-old B=/tmp/claimd-new scripts/bench-ab.sh
#
# Environment (all optional but A and B):
#   REPEAT=4 CALLERS=64 TARGET=leader DURATION=10s WARMUP=1s VOLUMES=60000
#   SERVER_ARGS=""   extra flags for every server of B (A gets SERVER_ARGS_A)
#   PPROF=1          serve pprof and keep a CPU and an allocation profile of
#                    the target server of each run in $TMP/runN/cpu.pprof and
#                    allocs.pprof (keeps $TMP), taken
#                    WATCH_DELAY=2 s into the run for WATCH_SECONDS=8 s
#   KEEP_TMP=1       keep the temporary directory (server logs, raw JSON)
#
# A binary A older than Status.Runtime's process ID gives no CPU figures
# (the tool cannot tell which processes are its servers): its runs say so
# and the CPU columns show n/a.
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
if [[ -n "$PPROF" ]]; then KEEP_TMP=1; fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/claimd-ab.XXXXXX")
LOG_NAME=bench-ab.sh
# shellcheck source=scripts/lib/cluster.sh
. scripts/lib/cluster.sh
on_exit_cleanup
CLAIMD=$B # the load generator, whichever side's servers run

# json_field NAME FILE: the first value of the top-level field NAME in the
# one-line JSON result FILE (a number, or a string without its quotes);
# empty when absent. The per-server list goes first: its entries have a
# cpu_seconds of their own.
json_field() {
	sed -e 's/"server_cpu":\[[^]]*\]//' \
		-e 's/.*"'"$1"'":\("\([^"\\]\|\\.\)*"\|[^,}]*\).*/\1/p' -e d "$2" |
		head -n 1 | sed -e 's/^"\(.*\)"$/\1/'
}

# run SIDE BINARY EXTRA_ARGS: one run on a fresh cluster of BINARY's
# servers; appends "side ops_per_sec ops cpu_s target_cpu_s p50_ms p99_ms
# cpu_ms_per_cycle target_cpu_ms_per_cycle" to $TMP/runs, "-" for a figure
# the run did not give.
run() {
	local side=$1 bin=$2 extra=$3
	new_run_dir
	local dir=$RUN_DIR
	SERVER_CLAIMD=$bin
	read -r -a CLUSTER_FLAGS <<<"$extra"
	start_cluster "$dir"
	: >"$dir/bench.err"
	WATCHER=
	if [[ -n "$PPROF" ]]; then start_watch "$dir"; fi
	if ! "$CLAIMD" bench -address "$JOIN" -json -mode claim -target "$TARGET" -callers "$CALLERS" \
		-volumes "$VOLUMES" -duration "$DURATION" -warmup "$WARMUP" -drain-timeout 0 \
		>"$dir/result.jsonl" 2>>"$dir/bench.err"; then
		log "run $RUN ($side) failed or saw errors; the tool's last lines:"
		tail -n 5 "$dir/bench.err" >&2
	fi
	if [[ -n "$WATCHER" ]] && ! wait "$WATCHER"; then
		log "no CPU profile for run $RUN (see $dir/watch.err)"
	fi
	stop_cluster
	local f=$dir/result.jsonl name v line=$side
	for name in ops_per_sec ops cpu_seconds target_cpu_seconds p50_ms p99_ms cpu_ms_per_cycle target_cpu_ms_per_cycle; do
		v=$(json_field "$name" "$f")
		line+=" ${v:--}"
	done
	echo "$line" >>"$TMP/runs"
	local no_cpu
	no_cpu=$(json_field no_cpu "$f")
	if [[ -n "$no_cpu" ]]; then
		log "run $RUN ($side): no server CPU figures: $no_cpu"
	fi
	# shellcheck disable=SC2086 # the fields of one run
	set -- $line
	awk -v run="$RUN" -v side="$1" -v ops="$2" -v calls="$3" -v cpu="$4" -v tcpu="$5" -v p50="$6" -v p99="$7" \
		-v cyc="$8" -v tcyc="$9" 'BEGIN {
		c = (calls > 0 && cpu != "-") ? sprintf("servers %.0f ms / 1k calls (target %.0f), %.3f ms / cycle (target %.3f)", 1e6 * cpu / calls, 1e6 * tcpu / calls, cyc, tcyc) : "server CPU n/a"
		printf "bench-ab.sh: run %d (%s): %.0f claim calls/s, %s, p50 %.2f ms, p99 %.2f ms\n", run, side, ops, c, p50, p99
	}' >&2
}

log "load average at the start: $(loadavg)"
for ((round = 1; round <= REPEAT; round++)); do
	if ((round % 2)); then
		run A "$A" "${SERVER_ARGS_A:-}"
		run B "$B" "${SERVER_ARGS:-}"
	else
		run B "$B" "${SERVER_ARGS:-}"
		run A "$A" "${SERVER_ARGS_A:-}"
	fi
done
log "load average at the end: $(loadavg)"

echo "| run | side | claim calls/s | all servers ms / 1k calls | target ms / 1k calls | all servers ms / cycle | target ms / cycle | p50 ms | p99 ms |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
awk '
	function median(a, n,    i, j, t) {
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	# med(s, k): the median of figure k over the runs of side s that have it.
	function med(s, k,    i, m) {
		m = 0
		delete x
		for (i = 1; i <= n[s]; i++) if ((s, k, i) in fig) x[++m] = fig[s, k, i]
		return m ? median(x, m) : "-"
	}
	function fmt(v, f) { return v == "-" ? "n/a" : sprintf(f, v) }
	function ratio(k,    a, b) {
		a = med("A", k); b = med("B", k)
		return (a == "-" || b == "-" || a <= 0) ? "n/a" : sprintf("%.2f", b / a)
	}
	{
		s = $1; i = ++n[s]
		fig[s, "ops", i] = $2; fig[s, "p50", i] = $6; fig[s, "p99", i] = $7
		all = tgt = acyc = tcyc = "-"
		if ($3 != "-" && $3 > 0 && $4 != "-") {
			all = fig[s, "all", i] = 1e6 * $4 / $3
			tgt = fig[s, "tgt", i] = 1e6 * ($5 == "-" ? 0 : $5) / $3
			if ($8 != "-") acyc = fig[s, "acyc", i] = $8
			if ($9 != "-") tcyc = fig[s, "tcyc", i] = $9
		}
		printf "| %d | %s | %.0f | %s | %s | %s | %s | %.2f | %.2f |\n", NR, s, $2,
			fmt(all, "%.0f"), fmt(tgt, "%.0f"), fmt(acyc, "%.3f"), fmt(tcyc, "%.3f"), $6, $7
	}
	END {
		printf "\nmedians:\n"
		for (k = 0; k < 2; k++) {
			s = k ? "B" : "A"
			cpu = med(s, "all") == "-" ? "no server CPU figures" : \
				sprintf("CPU per 1k calls %s ms (all servers), %s ms (target); per cycle %s / %s ms",
					fmt(med(s, "all"), "%.0f"), fmt(med(s, "tgt"), "%.0f"), fmt(med(s, "acyc"), "%.3f"), fmt(med(s, "tcyc"), "%.3f"))
			printf "  %s: %s claim calls/s; %s; p50 %s ms, p99 %s ms\n", s,
				fmt(med(s, "ops"), "%.0f"), cpu, fmt(med(s, "p50"), "%.2f"), fmt(med(s, "p99"), "%.2f")
		}
		printf "B/A: throughput %s, all servers CPU per call %s, target CPU per call %s, p50 %s, p99 %s\n",
			ratio("ops"), ratio("all"), ratio("tgt"), ratio("p50"), ratio("p99")
		if (med("A", "all") == "-" || med("B", "all") == "-")
			print "(n/a: a side has no server CPU figures; see the run lines above)"
	}' "$TMP/runs"
