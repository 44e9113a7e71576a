package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
)

func TestRaftHealthCommand_RegisteredAndRefusesArguments(t *testing.T) {
	_, _, usageOut := runCLI("no-such-command")
	if !strings.Contains(usageOut, "  operator raft health ") {
		t.Fatalf("usage exp: operator raft health listed got: %s", usageOut)
	}
	code, out, errOut := runCLI("operator", "raft", "health", "-address", "127.0.0.1:1", "-timeout", "1s", "now")
	if code != 1 || !strings.Contains(errOut, `unexpected argument "now"`) || out != "" {
		t.Fatalf("extra argument exp: exit 1, unexpected argument got: %d %q %q", code, out, errOut)
	}
}

// The table: a header, one row per server (leader first, as the server
// sorts them), then the verdict and the thresholds.
func TestRaftHealthCommand_TableShape(t *testing.T) {
	h := &structs.RaftHealthResponse{
		Healthy: false, FailureTolerance: 0, LeaderID: "id-1",
		LastContactThreshold: structs.HumanDuration(2 * time.Second), MaxTrailingLogs: 1024,
		DeadServerThreshold: structs.HumanDuration(5 * time.Minute), CleanupDeadServers: true, MinQuorum: 3,
		Servers: []structs.RaftServerHealth{
			{ID: "id-1", Name: "s1", Address: "10.0.0.1:4647", Leader: true, Voter: true, Status: "alive", Healthy: true, LastIndex: 120, Version: "v0.9.0"},
			{ID: "id-2", Name: "s2", Address: "10.0.0.2:4647", Voter: true, Status: "unreachable", Healthy: true, Version: "v0.8.1",
				LastContact: structs.HumanDuration(12345 * time.Microsecond), LastIndex: 119, IndexLag: 1},
			{ID: "id-3", Address: "10.0.0.3:4647", Voter: true, Status: "failed", Healthy: false,
				LastContact: structs.HumanDuration(93240 * time.Millisecond), LastIndex: 80, IndexLag: 40},
		},
	}
	var buf bytes.Buffer
	printRaftHealth(&buf, h)
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	want := [][]string{
		{"Node", "ID", "Address", "State", "Voter", "Status", "Healthy", "Last", "Contact", "Last", "Index", "Index", "Lag", "Version"},
		{"s1", "id-1", "10.0.0.1:4647", "leader", "true", "alive", "true", "0s", "120", "0", "v0.9.0"},
		{"s2", "id-2", "10.0.0.2:4647", "follower", "true", "unreachable", "true", "12ms", "119", "1", "v0.8.1"},
		{"-", "id-3", "10.0.0.3:4647", "follower", "true", "failed", "false", "1m33.2s", "80", "40", "-"},
	}
	if len(lines) != len(want)+4 {
		t.Fatalf("lines exp: %d got: %d\n%s", len(want)+4, len(lines), buf.String())
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d exp: %q got: %q", i, w, got)
		}
	}
	if lines[4] != "" || lines[5] != "Healthy: false (failure tolerance 0)" ||
		lines[6] != "Entry features every server applies: none yet" ||
		lines[7] != "Thresholds: last contact 2s, index lag 1024; dead-server cleanup on, after 5m0s unreachable, never below 3 voters" {
		t.Errorf("summary exp: blank, verdict, entry features, thresholds got: %q", lines[4:])
	}
}
