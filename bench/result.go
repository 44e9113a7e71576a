package bench

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Result is one run: one mode, one target, one callers value. It is what
// -json prints, one object per line.
type Result struct {
	Mode    Mode   `json:"mode"`
	Target  string `json:"target"`  // as asked: leader, follower or an address
	Address string `json:"address"` // the server the calls went to
	// Leader is the leader's address when the run started; LeaderChanged
	// is set when, during the run, the servers named another leader or none
	// (an election: calls were held or retried meanwhile).
	Leader        string `json:"leader"`
	LeaderChanged bool   `json:"leader_changed,omitempty"`
	// Security is how the tool talked to the cluster: "tls+acl", "tls",
	// "acl" or "" (plaintext, ACLs off). ACLs count as on when the tool's
	// token is one the servers know (ACL.TokenSelf).
	Security string    `json:"security,omitempty"`
	Callers  int       `json:"callers"`
	Volumes  int       `json:"volumes"`
	Started  time.Time `json:"started"`
	// Seconds is the measured window (shorter than -duration when the
	// claim pool ran out: PoolExhausted).
	Seconds       float64 `json:"seconds"`
	PoolExhausted bool    `json:"pool_exhausted,omitempty"`

	// Ops counts Volume.Claim calls in the window, releases included;
	// Claims and Releases split them. Every call that returned counts,
	// refused or failed ones too (Errors, Refusals).
	Ops          int64   `json:"ops"`
	Claims       int64   `json:"claims"`
	Releases     int64   `json:"releases"`
	OpsPerSec    float64 `json:"ops_per_sec"`
	ClaimsPerSec float64 `json:"claims_per_sec"`
	// Latency is over every call; ClaimLatency and ReleaseLatency split it.
	Latency        Latency  `json:"latency"`
	ClaimLatency   *Latency `json:"claim_latency,omitempty"`
	ReleaseLatency *Latency `json:"release_latency,omitempty"`
	// Errors counts failed calls by error code, expected refusals excluded.
	Errors map[string]int64 `json:"errors,omitempty"`
	// Drained is set when the tool waited after the run until the servers
	// had freed every claim released so far, which took DrainSeconds. When
	// the wait gave up first, Backlog volumes were still releasing.
	Drained      bool    `json:"drained,omitempty"`
	DrainSeconds float64 `json:"drain_seconds,omitempty"`
	Backlog      int     `json:"backlog,omitempty"`

	// Server CPU over the measured window (bench/cpu.go), when the servers
	// run on this machine; NoCPU says why not otherwise. CPUSeconds sums
	// every server, TargetCPUSeconds is the server the calls went to.
	ServerCPU        []ServerCPU `json:"server_cpu,omitempty"`
	CPUWallSeconds   float64     `json:"cpu_wall_seconds,omitempty"`
	CPUSeconds       float64     `json:"cpu_seconds,omitempty"`
	TargetCPUSeconds float64     `json:"target_cpu_seconds,omitempty"`
	NoCPU            string      `json:"no_cpu,omitempty"`
	// Cycles are the claim cycles completed in the window (claim mode: a
	// pair claimed and released; contended: a win), and the servers' CPU
	// per cycle, summed over all of them and the target's alone.
	Cycles              int64   `json:"cycles,omitempty"`
	CPUMSPerCycle       float64 `json:"cpu_ms_per_cycle,omitempty"`
	TargetCPUMSPerCycle float64 `json:"target_cpu_ms_per_cycle,omitempty"`

	// Contended mode: claims won, claims refused with max_claims, and
	// safety violations (two claims on a single-node-writer volume seen at
	// once, by a read or by the callers' own acknowledged intervals).
	Wins       int64    `json:"wins,omitempty"`
	Refusals   int64    `json:"refusals,omitempty"`
	WinsPerSec float64  `json:"wins_per_sec,omitempty"`
	Checks     int64    `json:"checks,omitempty"`
	Violations []string `json:"violations,omitempty"`

	// Scale mode: Nodes simulated nodes over NodeSessions shared sessions;
	// how long registering them, the volumes and allocs, and the claims
	// (Claims, one per volume) took; then the idle window: each server's
	// CPU and RSS and the heartbeats accepted per second (HeartbeatsFailed
	// counts failures over the whole run); then the takeover.
	Nodes            int          `json:"nodes,omitempty"`
	NodeSessions     int          `json:"node_sessions,omitempty"`
	NodesSeconds     float64      `json:"nodes_seconds,omitempty"`
	VolumesSeconds   float64      `json:"volumes_seconds,omitempty"`
	ClaimsSeconds    float64      `json:"claims_seconds,omitempty"`
	IdleSeconds      float64      `json:"idle_seconds,omitempty"`
	Idle             []ServerIdle `json:"idle,omitempty"`
	HeartbeatsPerSec float64      `json:"heartbeats_per_sec,omitempty"`
	HeartbeatsFailed int64        `json:"heartbeats_failed,omitempty"`
	Takeover         *Takeover    `json:"takeover,omitempty"`

	// Release mode: allocs stopped together, how many of their claims were
	// freed, and each claim's time from the stop to freed.
	Allocs      int      `json:"allocs,omitempty"`
	Freed       int      `json:"freed,omitempty"`
	FreedPerSec float64  `json:"freed_per_sec,omitempty"`
	StopToFreed *Latency `json:"stop_to_freed,omitempty"`
}

// OK reports whether the run saw nothing but expected outcomes.
func (r *Result) OK() bool {
	if len(r.Errors) > 0 || len(r.Violations) > 0 {
		return false
	}
	return r.Mode != ModeRelease || r.Freed == r.Allocs
}

// WriteText prints a run for a human, a few lines.
func (r *Result) WriteText(w io.Writer) {
	target := r.Target
	if target != r.Address {
		target += " " + r.Address
	}
	fmt.Fprintf(w, "%s  target=%s  callers=%d  volumes=%d\n", r.Mode, target, r.Callers, r.Volumes)
	switch r.Mode {
	case ModeScale:
		r.writeScaleText(w)
	case ModeHandoff:
		fmt.Fprintf(w, "  %d volumes changed hands in %.2fs (holders stopped together)\n", r.Ops, r.Seconds)
		fmt.Fprintf(w, "  stop→next holder running  p50 %s  p90 %s  p99 %s  max %s\n",
			fmtMS(r.Latency.P50), fmtMS(r.Latency.P90), fmtMS(r.Latency.P99), fmtMS(r.Latency.Max))
	case ModeRelease:
		fmt.Fprintf(w, "  %d allocs stopped, %d claims freed in %.2fs: %.0f claims freed/s\n",
			r.Allocs, r.Freed, r.Seconds, r.FreedPerSec)
		if r.StopToFreed != nil {
			fmt.Fprintf(w, "  stop→freed  p50 %s  p90 %s  p99 %s  max %s\n",
				fmtMS(r.StopToFreed.P50), fmtMS(r.StopToFreed.P90), fmtMS(r.StopToFreed.P99), fmtMS(r.StopToFreed.Max))
		}
	default:
		fmt.Fprintf(w, "  %d claim calls in %.2fs: %.0f ops/s (%d claims %.0f/s, %d releases)",
			r.Ops, r.Seconds, r.OpsPerSec, r.Claims, r.ClaimsPerSec, r.Releases)
		if r.PoolExhausted {
			fmt.Fprintf(w, " — claim pool used up, raise -volumes")
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  latency     p50 %s  p90 %s  p99 %s  max %s\n",
			fmtMS(r.Latency.P50), fmtMS(r.Latency.P90), fmtMS(r.Latency.P99), fmtMS(r.Latency.Max))
		if r.Mode == ModeContended {
			fmt.Fprintf(w, "  wins %d (%.0f/s), max_claims refusals %d, safety checks %d, violations %d\n",
				r.Wins, r.WinsPerSec, r.Refusals, r.Checks, len(r.Violations))
			for _, v := range r.Violations {
				fmt.Fprintf(w, "  VIOLATION: %s\n", v)
			}
		}
		switch {
		case r.Drained:
			fmt.Fprintf(w, "  released claims all freed %.2fs after the run\n", r.DrainSeconds)
		case r.Backlog > 0:
			fmt.Fprintf(w, "  %d volumes still releasing %.0fs after the run\n", r.Backlog, r.DrainSeconds)
		}
	}
	r.writeCPUText(w)
	if len(r.Errors) > 0 {
		fmt.Fprintf(w, "  errors: %s\n", fmtErrors(r.Errors))
	}
	if r.LeaderChanged {
		fmt.Fprintf(w, "  the leader changed during the run\n")
	}
}

// writeCPUText prints the servers' CPU over the window, per server and
// per claim cycle.
func (r *Result) writeCPUText(w io.Writer) {
	if r.Mode == ModeRelease || r.Mode == ModeScale {
		return
	}
	if r.ServerCPU == nil {
		if r.NoCPU != "" {
			fmt.Fprintf(w, "  server CPU: not measured (%s)\n", r.NoCPU)
		}
		return
	}
	parts := make([]string, 0, len(r.ServerCPU))
	for _, s := range r.ServerCPU {
		share := 0.0
		if r.CPUWallSeconds > 0 {
			share = 100 * s.Seconds / r.CPUWallSeconds
		}
		parts = append(parts, fmt.Sprintf("%s pid %d %.2fs (%.0f%% of a core)", s.Address, s.PID, s.Seconds, share))
	}
	fmt.Fprintf(w, "  server CPU over %.2fs: %s\n", r.CPUWallSeconds, strings.Join(parts, ", "))
	if r.Cycles > 0 {
		fmt.Fprintf(w, "  CPU per claim cycle: %.3f ms all servers, %.3f ms target (%d cycles)\n",
			r.CPUMSPerCycle, r.TargetCPUMSPerCycle, r.Cycles)
	}
}

// medianCPU is the median over runs of the CPU ms per claim cycle, the
// target's and all servers' (each its own median); ok is false when no
// run measured it. CPU per cycle is steadier than throughput on a busy
// machine, so it gets its own median rather than the throughput median's.
func medianCPU(rs []*Result) (target, all float64, ok bool) {
	var ts, as []float64
	for _, r := range rs {
		if r.Cycles > 0 && r.ServerCPU != nil {
			ts = append(ts, r.TargetCPUMSPerCycle)
			as = append(as, r.CPUMSPerCycle)
		}
	}
	if len(as) == 0 {
		return 0, 0, false
	}
	sort.Float64s(ts)
	sort.Float64s(as)
	return ts[len(ts)/2], as[len(as)/2], true
}

// cpuText is a table cell: the runs' median CPU ms per cycle, target / all
// servers.
func cpuText(rs []*Result) string {
	t, a, ok := medianCPU(rs)
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf("%.3f / %.3f", t, a)
}

func fmtMS(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.2fs", v/1000)
	}
	return fmt.Sprintf("%.2fms", v)
}

func fmtErrors(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func (r *Result) targetText() string {
	if r.LeaderChanged {
		return r.Target + " (leader changed)"
	}
	return r.Target
}

func (r *Result) drainText() string {
	switch {
	case r.Drained:
		return fmt.Sprintf("%.1f s", r.DrainSeconds)
	case r.Backlog > 0:
		return fmt.Sprintf("%d left after %.0f s", r.Backlog, r.DrainSeconds)
	}
	return "not measured"
}

// WriteMarkdown prints results as markdown tables, one per mode, in the
// order the modes first appear.
func WriteMarkdown(w io.Writer, rs []*Result) {
	var order []Mode
	byMode := map[Mode][]*Result{}
	for _, r := range rs {
		if _, ok := byMode[r.Mode]; !ok {
			order = append(order, r.Mode)
		}
		byMode[r.Mode] = append(byMode[r.Mode], r)
	}
	for i, m := range order {
		if i > 0 {
			fmt.Fprintln(w)
		}
		switch m {
		case ModeClaim:
			writeClaimTable(w, byMode[m])
		case ModeContended:
			fmt.Fprintln(w, "Contended: callers race for few single-node-writer volumes (each win is held, released, and freed before the next):")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| target | callers | volumes | claim calls/s | wins | wins/s | max_claims refusals | p50 | p99 | max | errors | violations |")
			fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
			for _, r := range byMode[m] {
				fmt.Fprintf(w, "| %s | %d | %d | %.0f | %d | %.1f | %d | %s | %s | %s | %s | %d of %d checks |\n",
					r.targetText(), r.Callers, r.Volumes, r.OpsPerSec, r.Wins, r.WinsPerSec, r.Refusals,
					fmtMS(r.Latency.P50), fmtMS(r.Latency.P99), fmtMS(r.Latency.Max),
					fmtErrors(r.Errors), len(r.Violations), r.Checks)
			}
		case ModeScale:
			writeScaleTables(w, byMode[m])
		case ModeRelease:
			fmt.Fprintln(w, "Release pipeline: N allocs stopped together, each claim timed from the stop until freed:")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| target | allocs | freed | total | claims freed/s | p50 stop→freed | p90 | p99 | max | errors |")
			fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
			for _, r := range byMode[m] {
				var l Latency
				if r.StopToFreed != nil {
					l = *r.StopToFreed
				}
				fmt.Fprintf(w, "| %s | %d | %d | %.2f s | %.0f | %s | %s | %s | %s | %s |\n",
					r.targetText(), r.Allocs, r.Freed, r.Seconds, r.FreedPerSec,
					fmtMS(l.P50), fmtMS(l.P90), fmtMS(l.P99), fmtMS(l.Max), fmtErrors(r.Errors))
			}
		}
	}
}

// writeClaimTable prints the claim-mode table. Runs of one configuration
// (security, target and callers) repeated on fresh clusters are one row:
// the median run by claim calls/s, with the range of all of them and every
// run's errors, so that a noisy machine shows as a range rather than as a
// difference between configurations. When runs differ in security, a
// column says which each row is, and a second table compares each secured
// configuration with the same one in plaintext.
func writeClaimTable(w io.Writer, rs []*Result) {
	var order []claimConfig
	groups := map[claimConfig][]*Result{}
	drains, repeated, secured, cpu := false, false, false, false
	for _, r := range rs {
		c := claimConfig{r.Security, r.Target, r.Callers}
		if _, ok := groups[c]; !ok {
			order = append(order, c)
		}
		groups[c] = append(groups[c], r)
		repeated = repeated || len(groups[c]) > 1
		drains = drains || r.Drained || r.Backlog > 0
		secured = secured || r.Security != ""
		cpu = cpu || r.ServerCPU != nil
	}
	fmt.Fprintln(w, "Claim + release of distinct volumes (claim calls/s counts claims and releases; a claim cycle is one claim and its release):")
	fmt.Fprintln(w)
	header := "| target | callers | claim calls/s | claims/s | p50 | p90 | p99 | max | errors |"
	rule := "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
	if secured {
		header = "| security " + header
		rule = "| --- " + rule
	}
	if cpu {
		header += " CPU ms per claim cycle, target / all servers (median) |"
		rule += " ---: |"
	}
	if repeated {
		header += " runs: claim calls/s |"
		rule += " --- |"
	}
	if drains {
		header += " freed after run |"
		rule += " ---: |"
	}
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, rule)
	for _, c := range order {
		g := byThroughput(groups[c])
		r := median(g)
		errs := map[string]int64{}
		target := r.targetText()
		for _, o := range g {
			for k, n := range o.Errors {
				errs[k] += n
			}
			if o.LeaderChanged {
				target = o.targetText()
			}
		}
		note := ""
		if r.PoolExhausted {
			note = fmt.Sprintf(" (pool used up after %.1fs)", r.Seconds)
		}
		if secured {
			fmt.Fprintf(w, "| %s ", securityText(r.Security))
		}
		fmt.Fprintf(w, "| %s | %d | %.0f%s | %.0f | %s | %s | %s | %s | %s |",
			target, r.Callers, r.OpsPerSec, note, r.ClaimsPerSec,
			fmtMS(r.Latency.P50), fmtMS(r.Latency.P90), fmtMS(r.Latency.P99), fmtMS(r.Latency.Max),
			fmtErrors(errs))
		if cpu {
			fmt.Fprintf(w, " %s |", cpuText(g))
		}
		if repeated {
			if len(g) == 1 {
				fmt.Fprintf(w, " 1 |")
			} else {
				fmt.Fprintf(w, " %d, median shown; %.0f to %.0f |", len(g), g[0].OpsPerSec, g[len(g)-1].OpsPerSec)
			}
		}
		if drains {
			fmt.Fprintf(w, " %s |", r.drainText())
		}
		fmt.Fprintln(w)
	}
	if secured {
		writeSecurityCost(w, order, groups)
	}
}

// claimConfig is one row of the claim table.
type claimConfig struct {
	security string
	target   string
	callers  int
}

// writeSecurityCost compares every secured configuration with the same
// target and callers in plaintext: the ratio of the median runs'
// throughput, and the ratio within each pair of runs (the i-th secured run
// with the i-th plaintext run: scripts/bench.sh runs them next to each
// other, so each pair saw the machine alike).
func writeSecurityCost(w io.Writer, order []claimConfig, groups map[claimConfig][]*Result) {
	header := false
	for _, c := range order {
		if c.security == "" {
			continue
		}
		plain := groups[claimConfig{"", c.target, c.callers}]
		if len(plain) == 0 {
			continue
		}
		if !header {
			header = true
			fmt.Fprintln(w)
			fmt.Fprintln(w, "Cost of security: secured median over plaintext median (cost = 1 − throughput ratio); pairs are the runs made next to each other:")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| security | target | callers | plaintext calls/s | secured calls/s | throughput ratio | cost | p50 plaintext → secured | p99 plaintext → secured | pair ratios | CPU per cycle ratio, target / all servers |")
			fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | ---: |")
		}
		sec := groups[c]
		p, s := median(byThroughput(plain)), median(byThroughput(sec))
		ratio := 0.0
		if p.OpsPerSec > 0 {
			ratio = s.OpsPerSec / p.OpsPerSec
		}
		var pairs []string
		for i := range min(len(plain), len(sec)) {
			if plain[i].OpsPerSec > 0 {
				pairs = append(pairs, fmt.Sprintf("%.2f", sec[i].OpsPerSec/plain[i].OpsPerSec))
			}
		}
		cpuRatio := "n/a"
		pt, pa, pok := medianCPU(plain)
		st, sa, sok := medianCPU(sec)
		if pok && sok && pt > 0 && pa > 0 {
			cpuRatio = fmt.Sprintf("%.2f / %.2f", st/pt, sa/pa)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.0f | %.0f | %.2f | %.0f%% | %s → %s | %s → %s | %s | %s |\n",
			securityText(c.security), c.target, c.callers, p.OpsPerSec, s.OpsPerSec, ratio, 100*(1-ratio),
			fmtMS(p.Latency.P50), fmtMS(s.Latency.P50), fmtMS(p.Latency.P99), fmtMS(s.Latency.P99),
			strings.Join(pairs, ", "), cpuRatio)
	}
}

// byThroughput is rs sorted by claim calls/s (a copy).
func byThroughput(rs []*Result) []*Result {
	g := append([]*Result(nil), rs...)
	sort.SliceStable(g, func(i, j int) bool { return g[i].OpsPerSec < g[j].OpsPerSec })
	return g
}

// median is the middle run of runs sorted by byThroughput.
func median(sorted []*Result) *Result { return sorted[len(sorted)/2] }

func securityText(s string) string {
	if s == "" {
		return "plaintext"
	}
	return s
}
