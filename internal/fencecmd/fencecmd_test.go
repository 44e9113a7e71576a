package fencecmd

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// alive reports whether the process whose pid is in file still runs.
func alive(t *testing.T, file string) bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return syscall.Kill(pid, 0) == nil
}

func waitGone(t *testing.T, file string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for alive(t, file) {
		if time.Now().After(deadline) {
			t.Fatalf("the command's child (pid in %s) outlived the fence command", file)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRun_HangingCommandIsKilledWithItsChildrenAtTheTimeout(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	start := time.Now()
	err := Run(context.Background(), "sleep 600 & echo $! > "+pidFile+"; wait", nil, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not finish within 300ms") {
		t.Fatalf("err = %v, want the timeout named", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Run took %s with a 300ms timeout", took)
	}
	waitGone(t, pidFile)
}

func TestRun_FailingCommandSaysHowWithItsOutput(t *testing.T) {
	err := Run(context.Background(), "echo cannot find the writer >&2; exit 3", nil, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "cannot find the writer") {
		t.Fatalf("err = %v, want the exit status and the output", err)
	}
}

func TestRun_SucceedingCommandLeavesNothingBehind(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	// The background child keeps the output pipe: Run must neither wait
	// for it nor leave it running.
	if err := Run(context.Background(), "sleep 600 & echo $! > "+pidFile+"; exit 0", []string{"X=1"}, 5*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	waitGone(t, pidFile)
}

func TestRun_EnvironmentIsPassed(t *testing.T) {
	out := filepath.Join(t.TempDir(), "env")
	if err := Run(context.Background(), `echo "$CLAIMD_ALLOC_ID" > `+out, []string{"CLAIMD_ALLOC_ID=a1"}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	if strings.TrimSpace(string(b)) != "a1" {
		t.Fatalf("got %q", b)
	}
}

func TestRun_OutputIsCapped(t *testing.T) {
	err := Run(context.Background(), "head -c 100000 /dev/zero | tr '\\0' x; exit 1", nil, 5*time.Second)
	if err == nil || len(err.Error()) > MaxOutput+200 {
		t.Fatalf("error of %d bytes", len(err.Error()))
	}
}
