#!/usr/bin/env bash
# Issue 20: claimd against etcd, in one run on one machine. Three etcd
# members on loopback (by default Debian's etcd-server, installed with apt
# when missing; or a given binary, or one built at a given release: see
# ETCD_SERVER and ETCD_BUILD below; default settings: fsync on, each its
# own temporary data directory), then three claimd servers the
# way scripts/bench.sh starts them (never both at once); at 1 and 64
# callers, to the leader and to a follower, each for the same warmup and
# measured time. etcd is driven by etcd's own benchmark tool (`benchmark
# put`, built from the Go module proxy into a cache directory, never into
# this repository); claimd by `claimd bench -mode claim`. One claimd claim
# call (a checked claim or a release) is compared with one etcd put of a
# value of about the same size as a claim request.
#
# Rounds (REPEAT) alternate which system goes first, so that a machine
# that speeds up or slows down weighs on both alike; every run gets a fresh
# cluster. The table shows each configuration's median run and the range,
# the claimd/etcd ratios, and the CPU time the servers used per operation
# (claimd: measured by `claimd bench` over its window; etcd: the members'
# /proc/PID/stat over the benchmark's run). Written to docs/performance.md,
# section "Against etcd" (its generated part, up to the next
# "##" or "###" heading). About 12 minutes with the defaults.
#
# Both systems run in plaintext without authentication in the main table
# (etcd's default; claimd with ACLs off): the comparison is of the write
# path, not of security, whose cost is measured on its own (SECURE=both
# scripts/bench.sh).
#
# Environment (all optional):
#   DURATION=10s  WARMUP=1s   as claimd bench's -duration and -warmup
#   CALLERS=1,64
#   TARGETS=leader,follower
#   REPEAT=3
#   VOLUMES=40000   claimd's claim pool (each pair used once per run)
#   KEY_SIZE=32 VALUE_SIZE=256   etcd put size (a claimd claim request with
#                   its IDs and node secret is about this size encoded)
#   ETCD_BENCHMARK_VERSION=v3.5.17   etcd's tools/benchmark (a 3.5 client
#                   speaks the v3 API of Debian's 3.4 server)
#   ETCD_BENCHMARK=path   use this benchmark binary instead of building it
#   ETCD_SERVER=path   the etcd server binary the members run (default:
#                  `etcd` on PATH, Debian's etcd-server, installed with
#                  apt-get when missing)
#   ETCDCTL=path   the etcdctl that checks health and finds the leader
#                  (default: the etcdctl beside ETCD_SERVER, else `etcdctl`
#                  on PATH)
#   ETCD_BUILD=v3.7.1   instead of ETCD_SERVER: build etcd and etcdctl of
#                  that release from the Go module proxy (modules
#                  go.etcd.io/etcd/server/v3 and go.etcd.io/etcd/etcdctl/v3
#                  at that version) into
#                  ${XDG_CACHE_HOME:-~/.cache}/claimd-bench/etcd-VERSION,
#                  once, never into this repository (scripts/lib/etcd-build.sh)
#   CLAIMD_BIN=path   the claimd binary for servers and load generator
#                  (default: built from this tree); e.g. a test build
#   SECURE=0       1: each round also runs both systems secured at
#                  SECURE_CALLERS (64) callers to the leader (rows
#                  "leader/tls+auth"): claimd with mutual TLS and ACLs (the
#                  management token from `claimd acl bootstrap`, the
#                  callers' node secret checked on every claim), etcd with
#                  client and peer TLS (certificates from `claimd tls`),
#                  client certificates required and auth enabled (the
#                  benchmark authenticates as its certificate's CN, a user
#                  with a read-write role on every key)
#   OUT=docs/performance.md   (OUT=/dev/null: print only)
#   KEEP_TMP=1      keep the temporary directory (logs, raw results)
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
CALLERS=${CALLERS:-1,64}
TARGETS=${TARGETS:-leader,follower}
REPEAT=${REPEAT:-3}
VOLUMES=${VOLUMES:-40000}
KEY_SIZE=${KEY_SIZE:-32}
VALUE_SIZE=${VALUE_SIZE:-256}
ETCD_BENCHMARK_VERSION=${ETCD_BENCHMARK_VERSION:-v3.5.17}
OUT=${OUT:-docs/performance.md}
SECURE=${SECURE:-0}
SECURE_CALLERS=${SECURE_CALLERS:-64}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/claimd-vs-etcd.XXXXXX")
LOG_NAME=bench-vs-etcd.sh
# shellcheck source=scripts/lib/cluster.sh
. scripts/lib/cluster.sh
# shellcheck source=scripts/lib/etcd-build.sh
. scripts/lib/etcd-build.sh
ETCD_PIDS=()
cleanup_extra() {
	if ((${#ETCD_PIDS[@]})); then stop_pids "${ETCD_PIDS[@]}"; fi
	ETCD_PIDS=()
}
on_exit_cleanup

seconds_of() { # 10s, 1.5s, 500ms -> seconds
	case "$1" in
	*ms) awk -v v="${1%ms}" 'BEGIN { print v / 1000 }' ;;
	*s) echo "${1%s}" ;;
	*m) awk -v v="${1%m}" 'BEGIN { print v * 60 }' ;;
	*)
		log "DURATION/WARMUP $1: use a number with s, ms or m"
		exit 2
		;;
	esac
}
DURATION_S=$(seconds_of "$DURATION")
WARMUP_S=$(seconds_of "$WARMUP")

# executable NAME VAR: the absolute path of the program NAME (a path, or a
# name looked up on PATH); exits naming VAR when there is none.
executable() {
	local p
	if ! p=$(command -v "$1"); then
		log "$2=$1: no such executable"
		exit 2
	fi
	realpath "$p"
}

# What the run needs: an etcd server and etcdctl (Debian's packages by
# default; a given binary; or a release built from the module proxy) and
# etcd's benchmark tool.
if [[ -n "${ETCD_BUILD:-}" && -n "${ETCD_SERVER:-}" ]]; then
	log "ETCD_BUILD and ETCD_SERVER: give one of them"
	exit 2
fi
if [[ -n "${ETCD_BUILD:-}" ]]; then
	build_etcd_server "$ETCD_BUILD"
	ETCD_SOURCE="built from the Go module proxy at $ETCD_BUILD (go.etcd.io/etcd/server/v3)"
elif [[ -n "${ETCD_SERVER:-}" ]]; then
	ETCD_SERVER=$(executable "$ETCD_SERVER" ETCD_SERVER)
	ETCD_SOURCE="the server binary $ETCD_SERVER"
else
	ETCD_SOURCE="Debian's etcd-server"
fi
if [[ -n "${ETCDCTL:-}" ]]; then ETCDCTL=$(executable "$ETCDCTL" ETCDCTL); fi
if [[ -z "${ETCDCTL:-}" && -n "${ETCD_SERVER:-}" && -x "$(dirname "$ETCD_SERVER")/etcdctl" ]]; then
	ETCDCTL="$(dirname "$ETCD_SERVER")/etcdctl"
fi
if { [[ -z "${ETCD_SERVER:-}" ]] && ! command -v etcd >/dev/null; } || { [[ -z "${ETCDCTL:-}" ]] && ! command -v etcdctl >/dev/null; }; then
	log "installing Debian's etcd-server and etcd-client"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client >/dev/null
fi
ETCD_SERVER=${ETCD_SERVER:-$(command -v etcd)}
ETCDCTL=${ETCDCTL:-$(command -v etcdctl)}
if [[ "$SECURE" == 1 ]] && ! command -v openssl >/dev/null; then
	log "installing openssl (reads the client certificate's CN for etcd's auth)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
fi
if pgrep -x etcd >/dev/null; then
	log "warning: an etcd not started by this script is running (pids $(pgrep -x etcd | tr '\n' ' ')): it shares the machine"
fi
ETCD_VERSION=$("$ETCD_SERVER" --version 2>/dev/null | awk '/etcd Version/ { print $3 }')
log "etcd $ETCD_VERSION: $ETCD_SOURCE ($ETCD_SERVER); etcdctl $ETCDCTL"
if [[ -z "${ETCD_BENCHMARK:-}" ]]; then build_etcd_benchmark "$ETCD_BENCHMARK_VERSION"; fi

LOAD_START=$(loadavg)
if [[ -n "${CLAIMD_BIN:-}" ]]; then
	CLAIMD=$(executable "$CLAIMD_BIN" CLAIMD_BIN)
	log "claimd: the binary $CLAIMD"
else
	build_claimd
fi
machine_facts
ETCDCTL_TLS=() BENCH_TLS=()
if [[ "$SECURE" == 1 ]]; then
	make_pki
	ETCDCTL_TLS=(--cacert "$CA_FILE" --cert "$CLIENT_CERT" --key "$CLIENT_KEY")
	BENCH_TLS=(--cacert "$CA_FILE" --cert "$CLIENT_CERT" --key "$CLIENT_KEY")
fi

# start_etcd DIR [secure]: three members on loopback, default settings,
# data under DIR; sets ETCD_PIDS and ETCD_ENDPOINTS (client URLs). With
# "secure": client and peer TLS, client certificates required, and auth
# enabled for the client certificate's CN (etcd_auth).
start_etcd() {
	local dir=$1 secure=${2:-}
	free_ports 6
	local peers=() clients=() cluster=() scheme=http tls=()
	CTL_TLS=()
	if [[ -n "$secure" ]]; then
		scheme=https
		CTL_TLS=("${ETCDCTL_TLS[@]}")
		tls=(--cert-file "$SERVER_CERT" --key-file "$SERVER_KEY" --trusted-ca-file "$CA_FILE" --client-cert-auth
			--peer-cert-file "$SERVER_CERT" --peer-key-file "$SERVER_KEY" --peer-trusted-ca-file "$CA_FILE" --peer-client-cert-auth)
	fi
	for i in 0 1 2; do
		clients+=("$scheme://127.0.0.1:${PORTS[$i]}")
		peers+=("$scheme://127.0.0.1:${PORTS[$((i + 3))]}")
		cluster+=("e$((i + 1))=${peers[$i]}")
	done
	local initial
	initial=$(IFS=,; echo "${cluster[*]}")
	ETCD_ENDPOINTS=("${clients[@]}")
	log "starting three etcd members, clients on ${clients[*]} (data under $dir)"
	ETCD_PIDS=()
	for i in 0 1 2; do
		"$ETCD_SERVER" --name "e$((i + 1))" --data-dir "$dir/e$((i + 1))" \
			--listen-client-urls "${clients[$i]}" --advertise-client-urls "${clients[$i]}" \
			--listen-peer-urls "${peers[$i]}" --initial-advertise-peer-urls "${peers[$i]}" \
			--initial-cluster "$initial" --initial-cluster-state new \
			--initial-cluster-token "claimd-vs-etcd-$RUN" "${tls[@]}" >"$dir/e$((i + 1)).log" 2>&1 &
		ETCD_PIDS+=($!)
	done
	local eps
	eps=$(IFS=,; echo "${clients[*]}")
	wait_until "etcd not healthy" "$dir/e*.log" "$ETCDCTL" "${CTL_TLS[@]}" --endpoints "$eps" --command-timeout 2s endpoint health
	if [[ -n "$secure" ]]; then etcd_auth "$eps" "$dir"; fi
}

# etcd_auth ENDPOINTS DIR: etcd's counterpart of claimd's ACLs: a root user
# (a random password, given on stdin, never on a command line), a user
# named after the client certificate's CN with a read-write role on every
# key, then auth enabled: the benchmark's requests are then authorised as
# that user, by its certificate.
etcd_auth() {
	local eps=$1 dir=$2 cn
	cn=$(openssl x509 -in "$CLIENT_CERT" -noout -subject -nameopt multiline | awk -F'= ' '/commonName/ { print $2 }')
	local ctl=("$ETCDCTL" "${CTL_TLS[@]}" --endpoints "$eps" --command-timeout 5s)
	{
		head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' | "${ctl[@]}" user add root --interactive=false &&
			"${ctl[@]}" user grant-role root root &&
			"${ctl[@]}" user add "$cn" --no-password &&
			"${ctl[@]}" role add bench &&
			"${ctl[@]}" role grant-permission bench readwrite --from-key "" &&
			"${ctl[@]}" user grant-role "$cn" bench &&
			"${ctl[@]}" auth enable
	} >"$dir/auth.log" 2>&1 || {
		log "enabling etcd auth failed:"
		tail -n 5 "$dir/auth.log" >&2
		exit 1
	}
}

# etcd_target TARGET: the client URL of the leader or of a follower.
etcd_target() {
	local want=true
	if [[ "$1" == follower ]]; then want=false; fi
	local eps
	eps=$(IFS=,; echo "${ETCD_ENDPOINTS[*]}")
	# The "fields" output names every value ("MemberID" : N, "Leader" : N,
	# "Endpoint" : "URL"), one member per paragraph: the simple output's
	# columns differ between releases (3.6 added a storage version and
	# more) and the table's borders too. The IDs are compared as strings
	# (64-bit numbers lose their low bits as awk's doubles).
	"$ETCDCTL" "${CTL_TLS[@]}" --endpoints "$eps" -w fields endpoint status | awk -v RS= -F'\n' -v want="$want" '
		{
			id = leader = ep = ""
			for (i = 1; i <= NF; i++) {
				split($i, kv, /" : /)
				if (kv[1] == "\"MemberID") id = kv[2]
				if (kv[1] == "\"Leader") leader = kv[2]
				if (kv[1] == "\"Endpoint") { ep = kv[2]; gsub(/"/, "", ep) }
			}
			if (id != "" && (((id "") == (leader "")) ? "true" : "false") == want) { print ep; exit }
		}
	'
}

# etcd_cpu_ticks: user+system ticks used so far by the etcd members.
etcd_cpu_ticks() {
	local pid total=0
	for pid in "${ETCD_PIDS[@]}"; do
		total=$((total + $(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat")))
	done
	echo "$total"
}

# etcd_put CALLERS ENDPOINT TOTAL OUTFILE: one `benchmark put` run: each
# caller its own client and connection (as claimd bench's callers have
# their own sessions), distinct sequential keys.
etcd_put() {
	local callers=$1 ep=$2 total=$3 out=$4
	"$ETCD_BENCHMARK" "${RUN_TLS[@]}" --endpoints "$ep" --clients "$callers" --conns "$callers" --precise put \
		--total "$total" --key-size "$KEY_SIZE" --val-size "$VALUE_SIZE" \
		--sequential-keys --key-space-size $((total * 4 + 1000000)) >"$out" 2>&1
}

# Fields of a benchmark report: requests/s, total seconds, p50 and p99 ms.
etcd_summary() {
	awk '
		/Requests\/sec:/ { rps = $2 }
		/^ *Total:/ { secs = $2 }
		/ 50% in / { p50 = $3 * 1000 }
		/ 99% in / { p99 = $3 * 1000 }
		END { if (rps == "") exit 1; printf "%s %s %.2f %.2f\n", rps, secs, p50, p99 }
	' "$1"
}

RESULTS="$TMP/results.tsv" # system target callers ops/s p50_ms p99_ms seconds cpu_ms_per_op
: >"$RESULTS"
FAILED=0

# etcd_run TARGET CALLERS [secure]: a fresh etcd cluster, a warmup of
# WARMUP, then a measured run sized to last DURATION. etcd's tool runs a
# fixed number of puts, not a time: the warmup's rate sizes the measured
# run, and the row shows the seconds it actually took.
etcd_run() {
	local target=$1 callers=$2 secure=${3:-} label=$1
	new_run_dir
	local dir=$RUN_DIR
	RUN_TLS=()
	if [[ -n "$secure" ]]; then
		RUN_TLS=("${BENCH_TLS[@]}")
		label="$target/tls+auth"
	fi
	start_etcd "$dir" "$secure"
	local ep
	ep=$(etcd_target "$target")
	if [[ -z "$ep" ]]; then
		log "no etcd $target found"
		FAILED=1
		stop_pids "${ETCD_PIDS[@]}"
		ETCD_PIDS=()
		return
	fi
	log "etcd benchmark put: target $label ($ep), $callers callers, $WARMUP warmup + $DURATION"
	# Warmup: puts until WARMUP has passed (at least one batch per caller).
	local t0 warm=$((callers * 20)) rate=0
	t0=$(date +%s.%N)
	while :; do
		etcd_put "$callers" "$ep" "$warm" "$dir/warmup.txt" || true
		rate=$(etcd_summary "$dir/warmup.txt" | cut -d' ' -f1) || rate=0
		if awk -v t0="$t0" -v t1="$(date +%s.%N)" -v w="$WARMUP_S" 'BEGIN { exit !(t1 - t0 >= w) }'; then break; fi
		warm=$((warm * 2))
	done
	local total
	total=$(awk -v r="$rate" -v d="$DURATION_S" -v c="$callers" 'BEGIN { n = int(r * d); if (n < c * 10) n = c * 10; print n }')
	local c0 c1 hz
	c0=$(etcd_cpu_ticks)
	if ! etcd_put "$callers" "$ep" "$total" "$dir/put.txt"; then
		log "etcd benchmark failed:"
		tail -n 20 "$dir/put.txt" >&2
		FAILED=1
	fi
	c1=$(etcd_cpu_ticks)
	hz=$(getconf CLK_TCK)
	local sum
	if sum=$(etcd_summary "$dir/put.txt"); then
		read -r rps secs p50 p99 <<<"$sum"
		local cpu
		cpu=$(awk -v t=$((c1 - c0)) -v hz="$hz" -v n="$total" 'BEGIN { printf "%.3f", 1000 * t / hz / n }')
		echo "etcd $label $callers $rps $p50 $p99 $secs $cpu" >>"$RESULTS"
		log "  etcd: $rps puts/s, p50 $p50 ms, p99 $p99 ms over $secs s; members' CPU $cpu ms per put"
	else
		log "no summary in the benchmark's output (see $dir/put.txt)"
		FAILED=1
	fi
	stop_pids "${ETCD_PIDS[@]}"
	ETCD_PIDS=()
	if [[ -z "${KEEP_TMP:-}" ]]; then rm -rf "$dir"; fi
}

# json_field FILE NAME: the first number named NAME in FILE (claimd
# bench's JSON: "latency" comes before the claim/release split).
# Empty when there is none (a run without CPU figures has no
# cpu_ms_per_cycle).
json_field() { grep -o "\"$2\":[0-9.e+-]*" "$1" 2>/dev/null | head -n 1 | cut -d: -f2 || true; }

# claimd_run TARGET CALLERS [secure]: a fresh claimd cluster and one
# claimd bench run (secure: mutual TLS and ACLs, as scripts/bench.sh
# SECURE=both runs them).
claimd_run() {
	local target=$1 callers=$2 secure=${3:-} label=$1
	new_run_dir
	local dir=$RUN_DIR
	local tls=()
	TOKEN=
	start_cluster "$dir" "$secure"
	if [[ -n "$secure" ]]; then
		tls=(-ca-cert "$CA_FILE" -client-cert "$CLIENT_CERT" -client-key "$CLIENT_KEY")
		label="$target/tls+auth"
	fi
	log "claimd bench: target $label, $callers callers, $WARMUP warmup + $DURATION"
	# The token goes by the environment (ps shows arguments to every user).
	if ! CLAIMD_TOKEN="${TOKEN:-}" "$CLAIMD" bench -address "$JOIN" "${tls[@]}" -json -keep -mode claim -target "$target" -callers "$callers" \
		-volumes "$VOLUMES" -duration "$DURATION" -warmup "$WARMUP" -drain-timeout 0 \
		>"$dir/result.json" 2>"$dir/bench.err"; then
		log "claimd bench failed or saw errors:"
		tail -n 5 "$dir/bench.err" >&2
		FAILED=1
	fi
	local ops p50 p99 secs cpu
	ops=$(json_field "$dir/result.json" ops_per_sec)
	p50=$(json_field "$dir/result.json" p50_ms)
	p99=$(json_field "$dir/result.json" p99_ms)
	secs=$(json_field "$dir/result.json" seconds)
	cpu=$(json_field "$dir/result.json" cpu_ms_per_cycle)
	if [[ -n "$ops" ]]; then
		# Per claim call: a cycle is two calls (a claim and its release).
		cpu=$(awk -v c="${cpu:-0}" 'BEGIN { if (c > 0) printf "%.3f", c / 2; else print "n/a" }')
		echo "claimd $label $callers $ops $p50 $p99 $secs $cpu" >>"$RESULTS"
		log "  claimd: $ops claim calls/s, p50 $p50 ms, p99 $p99 ms over $secs s; servers' CPU $cpu ms per claim call"
	else
		log "no result from claimd bench (see $dir/bench.err)"
		FAILED=1
	fi
	stop_cluster
	if [[ -z "${KEEP_TMP:-}" ]]; then rm -rf "$dir"; fi
}

IFS=, read -r -a CALLER_LIST <<<"$CALLERS"
IFS=, read -r -a TARGET_LIST <<<"$TARGETS"
system_round() {
	local system=$1 c t
	for c in "${CALLER_LIST[@]}"; do
		for t in "${TARGET_LIST[@]}"; do "${system}_run" "$t" "$c"; done
	done
	if [[ "$SECURE" == 1 ]]; then "${system}_run" leader "$SECURE_CALLERS" secure; fi
}
for ((round = 1; round <= REPEAT; round++)); do
	log "round $round of $REPEAT"
	if ((round % 2)); then
		system_round etcd
		system_round claimd
	else
		system_round claimd
		system_round etcd
	fi
done
LOAD_END=$(loadavg)

# The table: per (callers, target), each system's median run by
# throughput (its p50/p99 shown with it) and the range, the median CPU per
# operation, and the ratios of the medians.
TABLE=$(awk '
	function sortn(a, n,    i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t } }
	function ms(v) { return sprintf("%.2f ms", v) }
	{
		k = $3 SUBSEP $2
		if (!(k in seen)) { seen[k] = 1; order[++nk] = k }
		n[$1, k]++; i = n[$1, k]
		ops[$1, k, i] = $4; p50[$1, k, i] = $5; p99[$1, k, i] = $6
		if ($8 != "n/a") { nc[$1, k]++; cpu[$1, k, nc[$1, k]] = $8 }
	}
	# med(system, key): index of the median run by throughput; lo/hi the range.
	function med(s, k,    i, m, idx, v, t, j) {
		m = n[s, k]
		for (i = 1; i <= m; i++) { idx[i] = i; v[i] = ops[s, k, i] }
		for (i = 2; i <= m; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) {
			t = v[j]; v[j] = v[j-1]; v[j-1] = t; t = idx[j]; idx[j] = idx[j-1]; idx[j-1] = t
		}
		lo = v[1]; hi = v[m]
		return idx[int((m + 1) / 2)]
	}
	function medcpu(s, k,    i, m, v) {
		m = nc[s, k]
		if (!m) return 0
		for (i = 1; i <= m; i++) v[i] = cpu[s, k, i]
		sortn(v, m)
		return v[int((m + 1) / 2)]
	}
	END {
		print "| callers | target | etcd puts/s | etcd p50 | etcd p99 | claimd claim calls/s | claimd p50 | claimd p99 | throughput claimd/etcd | p50 claimd/etcd | p99 claimd/etcd | CPU ms per op, etcd / claimd | runs (etcd; claimd) |"
		print "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
		for (x = 1; x <= nk; x++) {
			k = order[x]; split(k, kk, SUBSEP)
			if (!n["etcd", k] || !n["claimd", k]) continue
			e = med("etcd", k); elo = lo; ehi = hi
			c = med("claimd", k); clo = lo; chi = hi
			eo = ops["etcd", k, e]; co = ops["claimd", k, c]
			ec = medcpu("etcd", k); cc = medcpu("claimd", k)
			printf "| %d | %s | %.0f | %s | %s | %.0f | %s | %s | %.2f | %.2f | %.2f | %s / %s | %d: %.0f-%.0f; %d: %.0f-%.0f |\n",
				kk[1], kk[2], eo, ms(p50["etcd", k, e]), ms(p99["etcd", k, e]),
				co, ms(p50["claimd", k, c]), ms(p99["claimd", k, c]),
				co / eo, p50["claimd", k, c] / p50["etcd", k, e], p99["claimd", k, c] / p99["etcd", k, e],
				ec ? sprintf("%.3f", ec) : "n/a", cc ? sprintf("%.3f", cc) : "n/a",
				n["etcd", k], elo, ehi, n["claimd", k], clo, chi
			mo[kk[2], kk[1], "etcd"] = eo; mo[kk[2], kk[1], "claimd"] = co
		}
		first = 1
		for (x = 1; x <= nk; x++) {
			k = order[x]; split(k, kk, SUBSEP)
			if (kk[2] != "follower" || !mo["leader", kk[1], "claimd"] || !mo["follower", kk[1], "claimd"]) continue
			if (first) { print ""; first = 0 }
			printf "Through a follower at %d callers: claimd %.0f%% of its leader figure, etcd %.0f%%.\n", kk[1],
				100 * mo["follower", kk[1], "claimd"] / mo["leader", kk[1], "claimd"],
				100 * mo["follower", kk[1], "etcd"] / mo["leader", kk[1], "etcd"]
		}
	}
' "$RESULTS")
echo
echo "$TABLE"

SECTION="$TMP/section.md"
# How the section names the etcd under test and the command's extra
# settings (a path on this machine means nothing to a reader: the
# section says "a given binary" and shows the variable).
CMD_ETCD='' CMD_CLAIMD=''
if [[ -n "${ETCD_BUILD:-}" ]]; then
	ETCD_SOURCE_DOC="built from the Go module proxy at $ETCD_BUILD"
	CMD_ETCD="ETCD_BUILD=$ETCD_BUILD "
elif [[ "$ETCD_SOURCE" == "Debian's etcd-server" ]]; then
	ETCD_SOURCE_DOC=$ETCD_SOURCE
else
	ETCD_SOURCE_DOC="a given etcd binary"
	CMD_ETCD="ETCD_SERVER=... "
fi
if [[ -n "${CLAIMD_BIN:-}" ]]; then CMD_CLAIMD="CLAIMD_BIN=... "; fi
{
	echo "## Against etcd"
	echo
	echo "Written by \`scripts/bench-vs-etcd.sh\`: in one run on one machine, three etcd"
	echo "$ETCD_VERSION members ($ETCD_SOURCE_DOC, default settings: fsync on, each"
	echo "its own data directory on the same disk) and three \`claimd agent -server\`"
	echo "processes (production Raft timings, fsync on, the default log store),"
	echo "never both at once, each run on a fresh cluster on loopback, rounds"
	echo "alternating which system goes first. Both in plaintext without"
	echo "authentication (etcd's default; claimd with ACLs off): the comparison is"
	echo "of the write path; security's cost is measured on its own (section"
	echo "\"Security cost\"). etcd is driven by etcd's own benchmark tool (\`benchmark"
	echo "put\`, tools/benchmark $ETCD_BENCHMARK_VERSION from the Go module proxy; each caller"
	echo "its own client and connection, distinct sequential keys of $KEY_SIZE bytes,"
	echo "values of $VALUE_SIZE bytes, about a claim request's size); claimd by \`claimd"
	echo "bench -mode claim\` (each caller its own session, claim then release of"
	echo "distinct volumes; a release says, as an agent's terminal report does, that"
	echo "the simulated node has node-detached the claim itself, so the release"
	echo "entry frees it: decision 61; \`-servers-detach\` measures the path before,"
	echo "where every release also set off the servers' node detach and the"
	echo "checkpoint that freed the claim). One claimd claim call (a checked claim or"
	echo "a release) is compared with one etcd put. etcd's tool runs a fixed number of"
	echo "puts: a warmup of $WARMUP sizes the measured run to about $DURATION."
	echo "CPU ms per op: the three servers' user+system CPU over the measured window"
	echo "(/proc/PID/stat) per put, and per claim call (half a claim cycle; measured"
	echo "by \`claimd bench\`). Each row is the median run by throughput with that run's"
	echo "latency; the last column gives the number of runs and their range."
	if [[ "$SECURE" == 1 ]]; then
		echo "Rows \"leader/tls+auth\": both systems secured ($SECURE_CALLERS callers to the leader):"
		echo "claimd with mutual TLS and ACLs (the callers' node secret checked on every"
		echo "claim), etcd with client and peer TLS, client certificates required and auth"
		echo "enabled (the benchmark's user is its certificate's CN, with a read-write"
		echo "role)."
	fi
	echo
	echo "- machine: $(nproc) cores ($CPU), $MEM memory, Linux $(uname -r)"
	echo "- commit: $COMMIT, $(date -u +%Y-%m-%d)"
	echo "- command: \`${CMD_ETCD}${CMD_CLAIMD}DURATION=$DURATION WARMUP=$WARMUP CALLERS=$CALLERS TARGETS=$TARGETS REPEAT=$REPEAT VOLUMES=$VOLUMES SECURE=$SECURE scripts/bench-vs-etcd.sh\`"
	echo "- load average (1, 5, 15 min) at the start: $LOAD_START; at the end: $LOAD_END"
	echo
	echo "$TABLE"
	if ((FAILED)); then
		echo
		echo "Some runs failed or saw errors; see the script's output."
	fi
} >"$SECTION"
replace_section '^## Against etcd$' '^##(#)? ' "$SECTION"
if [[ "$OUT" != /dev/null ]]; then log "wrote section \"Against etcd\" to $OUT"; fi
exit "$FAILED"
