package bench

import (
	"fmt"
	"io"
	"strings"
)

// writeScaleText prints a scale run for a human.
func (r *Result) writeScaleText(w io.Writer) {
	fmt.Fprintf(w, "  %d nodes on %d sessions registered in %.1fs; %d volumes and allocs in %.1fs; %d claims in %.1fs\n",
		r.Nodes, r.NodeSessions, r.NodesSeconds, r.Volumes, r.VolumesSeconds, r.Claims, r.ClaimsSeconds)
	if r.IdleSeconds > 0 {
		fmt.Fprintf(w, "  idle %.0fs: %.0f heartbeats/s accepted\n", r.IdleSeconds, r.HeartbeatsPerSec)
	}
	for _, s := range r.Idle {
		role := "follower"
		if s.Leader {
			role = "leader"
		}
		fmt.Fprintf(w, "    %s %s pid %d: CPU %.1f%% of a core, RSS %s\n", role, s.Address, s.PID, 100*s.CPUCore, fmtBytes(s.RSSBytes))
	}
	if r.NoCPU != "" {
		fmt.Fprintf(w, "  server CPU and RSS: not measured (%s)\n", r.NoCPU)
	}
	if t := r.Takeover; t != nil {
		fmt.Fprintf(w, "  takeover after killing %s (pid %d): %s\n", t.Killed, t.KilledPID, t.summary())
		if t.Error != "" {
			fmt.Fprintf(w, "  takeover incomplete: %s\n", t.Error)
		}
	}
	if r.HeartbeatsFailed > 0 {
		fmt.Fprintf(w, "  %d heartbeats failed over the run\n", r.HeartbeatsFailed)
	}
}

func (t *Takeover) summary() string {
	return fmt.Sprintf("new leader %s after %.2fs, claim served %.2fs, released claim freed %.2fs, first heartbeat accepted %.2fs, %d heartbeats held through the election answered by %.2fs (%d failed), every node heartbeated again %.2fs; takeover %.2fs; nodes seen down within %.0fs: %d",
		t.NewLeader, t.LeaderSeconds, t.ClaimSeconds, t.FreedSeconds, t.FirstBeatSeconds, t.HeldBeats, t.HeldBeatsSeconds, t.HeldFailed,
		t.AllBeatsSeconds, t.Seconds, t.WatchedSeconds, t.NodesSeenDown)
}

func fmtBytes(b int64) string {
	if b >= 1<<30 {
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

// writeScaleTables prints scale runs: the idle servers, then the
// takeover.
func writeScaleTables(w io.Writer, rs []*Result) {
	fmt.Fprintln(w, "Scale: simulated nodes heartbeating, every volume claimed; each server while idle (heartbeats only):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| nodes | volumes (claimed) | setup: nodes / volumes+allocs / claims (claim errors, retried) | heartbeats/s | server | role | CPU (share of one core) | RSS |")
	fmt.Fprintln(w, "| ---: | ---: | --- | ---: | --- | --- | ---: | ---: |")
	for _, r := range rs {
		setup := fmt.Sprintf("%.1f s / %.1f s / %.1f s (%s)", r.NodesSeconds, r.VolumesSeconds, r.ClaimsSeconds, fmtErrors(r.Errors))
		if len(r.Idle) == 0 {
			fmt.Fprintf(w, "| %d | %d | %s | %.0f | n/a | | %s | |\n", r.Nodes, r.Volumes, setup, r.HeartbeatsPerSec, r.NoCPU)
		}
		for _, s := range r.Idle {
			role := "follower"
			if s.Leader {
				role = "leader"
			}
			fmt.Fprintf(w, "| %d | %d | %s | %.0f | %s | %s | %.1f%% | %s |\n",
				r.Nodes, r.Volumes, setup, r.HeartbeatsPerSec, s.Address, role, 100*s.CPUCore, fmtBytes(s.RSSBytes))
		}
	}
	var tks []string
	for _, r := range rs {
		t := r.Takeover
		if t == nil {
			continue
		}
		row := fmt.Sprintf("| %d | %.2f s | %.2f s | %.2f s | %.2f s | %.2f s (%d held, %d failed) | %.2f s | **%.2f s** | %d (within %.0f s) | %s |",
			r.Nodes, t.LeaderSeconds, t.ClaimSeconds, t.FreedSeconds, t.FirstBeatSeconds, t.HeldBeatsSeconds, t.HeldBeats, t.HeldFailed,
			t.AllBeatsSeconds, t.Seconds, t.NodesSeenDown, t.WatchedSeconds, orNone(t.Error))
		tks = append(tks, row)
	}
	if len(tks) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Takeover: the leader killed (SIGKILL), times from the kill:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| nodes | new leader | claim served | released claim freed | first heartbeat accepted | heartbeats held through the election answered | every node heartbeated again (≥ TTL/3) | takeover (claim, held heartbeats) | nodes marked down | incomplete |")
	fmt.Fprintln(w, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	fmt.Fprintln(w, strings.Join(tks, "\n"))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
