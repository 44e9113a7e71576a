# shellcheck shell=bash
# Shared by scripts/bench.sh, scripts/bench-vs-etcd.sh and
# scripts/bench-scale.sh: build claimd, pick free loopback ports, start
# and stop a three-server claimd cluster, make a PKI, describe the machine
# and replace a section of docs/performance.md. Source it after setting
#   TMP    a temporary directory the caller removes on exit
#   LOG_NAME  the prefix of log lines (the script's name)
# and optionally PPROF (serve pprof on every server: DEBUG_ADDRS), OUT
# (the markdown file replace_section writes; /dev/null: none) and
# SERVER_CLAIMD (the binary the servers run, when it is not CLAIMD: a
# before/after comparison runs the servers of either binary and the load
# generator of one).

if ! declare -p CLUSTER_FLAGS >/dev/null 2>&1; then CLUSTER_FLAGS=(); fi
PIDS=()

log() { echo "${LOG_NAME:-bench}: $*" >&2; }

# build_claimd: the binary under test, in $TMP (sets CLAIMD).
build_claimd() {
	log "building claimd"
	go build -o "$TMP/claimd" ./cmd/claimd
	CLAIMD="$TMP/claimd"
}

# Free loopback ports: nothing answers on them now. They are taken from
# below the kernel's ephemeral range: a port in that range can be the local
# end of some outgoing connection (one server's to another), which does not
# answer but still makes the next server's listen fail with "address
# already in use".
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
EPHEMERAL_LOW=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
PORT_SPAN=$((EPHEMERAL_LOW - 10000 - 1000))
((PORT_SPAN >= 1000)) || PORT_SPAN=1000
NEXT_PORT=$((10000 + RANDOM % PORT_SPAN))
# free_ports [N]: N (default 3) free ports in PORTS.
free_ports() {
	local n=${1:-3}
	PORTS=()
	while ((${#PORTS[@]} < n)); do
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

# start_server I DIR: server s(I+1) of the cluster whose addresses are in
# ADDRS, with the flags in SERVER_EXTRA and its pid in PIDS[I] (also used
# to restart a stopped server on its data).
start_server() {
	local i=$1 dir=$2
	local name="s$((i + 1))"
	local debug=()
	if [[ -n "${PPROF:-}" ]]; then debug=(-debug-addr "${DEBUG_ADDRS[$i]}"); fi
	"${SERVER_CLAIMD:-$CLAIMD}" agent -server -bootstrap-expect 3 -join "$JOIN" -bind "${ADDRS[$i]}" -http-addr off \
		-data-dir "$dir/$name" -node-name "$name" "${SERVER_EXTRA[@]}" "${debug[@]}" >>"$dir/$name.log" 2>&1 &
	PIDS[i]=$!
}

# start_cluster DIR [secure]: three servers with data under DIR; sets JOIN,
# ADDRS, PIDS and DEBUG_ADDRS (PPROF). With "secure" the servers run mutual
# TLS and ACLs, and TOKEN is the management token from `claimd acl
# bootstrap` (which also shows a leader was elected). Extra server flags:
# the array CLUSTER_FLAGS.
start_cluster() {
	local dir=$1 secure=${2:-}
	free_ports
	ADDRS=()
	for p in "${PORTS[@]}"; do ADDRS+=("127.0.0.1:$p"); done
	JOIN=$(IFS=,; echo "${ADDRS[*]}")
	SERVER_EXTRA=("${CLUSTER_FLAGS[@]}")
	if [[ -n "$secure" ]]; then
		SERVER_EXTRA+=(-tls-ca-file "$CA_FILE" -tls-cert-file "$SERVER_CERT" -tls-key-file "$SERVER_KEY" -acl-enabled)
	fi
	DEBUG_ADDRS=()
	if [[ -n "${PPROF:-}" ]]; then
		local saved=("${PORTS[@]}")
		free_ports
		for p in "${PORTS[@]}"; do DEBUG_ADDRS+=("127.0.0.1:$p"); done
		PORTS=("${saved[@]}")
	fi
	log "starting three servers on $JOIN (data under $dir${secure:+; mutual TLS and ACLs})"
	PIDS=()
	for i in 0 1 2; do start_server "$i" "$dir"; done
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
	wait_until "no leader" "$dir/s*.log" has_leader
}

# wait_until WHAT LOGS CMD...: run CMD every half second until it
# succeeds; after 60 s, say WHAT did not happen, show the tail of the LOGS
# (a glob) and exit.
wait_until() {
	local what=$1 logs=$2
	shift 2
	local deadline=$((SECONDS + 60))
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS > deadline)); then
			log "$what after 60 s; logs:"
			# shellcheck disable=SC2086 # a glob
			tail -n 20 $logs >&2
			exit 1
		fi
		sleep 0.5
	done
}

# has_leader: the claimd cluster at JOIN names a leader.
has_leader() { "${SERVER_CLAIMD:-$CLAIMD}" operator raft list-peers -address "$JOIN" -timeout 2s 2>/dev/null | grep -q leader; }

# start_watch DIR: with PPROF, in the background (pid in WATCHER), take a
# CPU profile and an allocation profile of the server the calls go to
# during the run's measured window (DIR/cpu.pprof, DIR/allocs.pprof): it waits for the tool's "run: ..." line in
# DIR/bench.err, which names that server, then WATCH_DELAY (2 s: the
# callers' sessions and the 1 s warmup), and profiles for WATCH_SECONDS
# (8 s of the 10 s window); the other two servers' CPU profiles over the
# same window go to DIR/cpu-sN.pprof (N their 1-based number). The servers' CPU time per claim cycle is
# measured by `claimd bench` itself (bench/cpu.go).
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
		target=
		for i in 0 1 2; do
			if [[ "${ADDRS[$i]}" == "$addr" ]]; then target=$i; fi
		done
		[[ -n "$target" ]] || exit 1
		sleep "${WATCH_DELAY:-2}"
		# The allocations over the same window (a delta profile) beside
		# the CPU profile: allocations per call are a lever of their own.
		curl -sf -o "$dir/allocs.pprof" "http://${DEBUG_ADDRS[$target]}/debug/pprof/allocs?seconds=${WATCH_SECONDS:-8}" &
		# The other servers too: a claim call costs the followers about
		# as much CPU as the leader (applying and persisting the entries).
		for i in 0 1 2; do
			if ((i != target)); then
				curl -sf -o "$dir/cpu-s$((i + 1)).pprof" "http://${DEBUG_ADDRS[$i]}/debug/pprof/profile?seconds=${WATCH_SECONDS:-8}" &
			fi
		done
		curl -sf -o "$dir/cpu.pprof" "http://${DEBUG_ADDRS[$target]}/debug/pprof/profile?seconds=${WATCH_SECONDS:-8}"
		wait
	) >/dev/null 2>"$dir/watch.err" &
	WATCHER=$!
}

# stop_pids PID...: SIGTERM, then SIGKILL what is still running after 15
# s. A leader stopped together with its followers can hang in shutdown (a
# release worker waits on a Raft apply that can no longer commit); the
# data is thrown away anyway.
stop_pids() {
	local pid
	for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
	local deadline=$((SECONDS + 15))
	for pid in "$@"; do
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
		if kill -0 "$pid" 2>/dev/null; then
			log "process $pid did not stop within 15 s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
		wait "$pid" 2>/dev/null || true
	done
}

# stop_cluster: stop every server in PIDS.
stop_cluster() {
	if ((${#PIDS[@]})); then stop_pids "${PIDS[@]}"; fi
	PIDS=()
}

# on_exit_cleanup: on exit or a signal, stop what the script started (its
# cleanup_extra first, when it defines one), then remove TMP.
cleanup() {
	if declare -F cleanup_extra >/dev/null; then cleanup_extra; fi
	stop_cluster
	remove_tmp
}
on_exit_cleanup() {
	trap cleanup EXIT
	trap 'exit 130' INT TERM
}

# remove_tmp: remove TMP, or say where it was kept (KEEP_TMP).
remove_tmp() {
	if [[ -z "${KEEP_TMP:-}" ]]; then
		rm -rf "$TMP"
	else
		echo "kept $TMP" >&2
	fi
}

# new_run_dir: RUN counts up, RUN_DIR is its own directory under TMP.
RUN=0
new_run_dir() {
	RUN=$((RUN + 1))
	RUN_DIR="$TMP/run$RUN"
	mkdir -p "$RUN_DIR"
}

# machine_facts: MEM, CPU (model), COMMIT (with "+" when the tree has
# uncommitted changes) and LOAD (now) for the docs.
machine_facts() {
	MEM=$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
	CPU=$(awk -F: '/model name/ { sub(/^ +/, "", $2); print $2; exit }' /proc/cpuinfo)
	COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
	if [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then COMMIT="$COMMIT+ (uncommitted changes)"; fi
}
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# replace_section HEADING_RE END_RE FILE: put FILE in $OUT in place of the
# lines from the heading matching HEADING_RE up to (not including) the next
# line matching END_RE, or append it when there is no such heading.
replace_section() {
	local heading=$1 end=$2 section=$3
	if [[ "${OUT:-/dev/null}" == /dev/null ]]; then return; fi
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
