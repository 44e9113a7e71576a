package server

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/claimd/claimd/internal/testutil"
)

// Servers started without a name on one host get distinct names, each
// the same again when it restarts on its data dir (issue 30).
func TestNodeName_DefaultIsUniquePerDataDirAndStable(t *testing.T) {
	start := func(dir string) string {
		t.Helper()
		s, err := New(Config{DataDir: dir, BindAddr: "127.0.0.1:0", RaftMultiplier: 0.5, JoinInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatalf("start server: %v", err)
		}
		name := s.Self().Name
		if err := s.Shutdown(); err != nil {
			t.Fatal(err)
		}
		return name
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := start(dirA), start(dirB)
	if a == b || a == "" {
		t.Fatalf("exp: two distinct names got: %q and %q", a, b)
	}
	if again := start(dirA); again != a {
		t.Fatalf("restart exp: the same name %q got: %q", a, again)
	}
	if id := loadID(t, dirA); !strings.HasSuffix(a, "-"+id[:8]) {
		t.Fatalf("exp: the name ends with the ID's start %q got: %q", id[:8], a)
	}
}

func loadID(t *testing.T, dir string) string {
	t.Helper()
	id, err := loadOrCreateID(dir)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A clean shutdown logs no error: the Raft transport's stream layer is
// closed by the transport itself, after it knows it is shutting down
// (issue 30: "[ERROR] raft stream layer closed" on every stop).
func TestShutdown_CleanStopLogsNoError(t *testing.T) {
	var buf safeBuffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Debug})
	s, err := New(Config{DataDir: t.TempDir(), BindAddr: "127.0.0.1:0", BootstrapExpect: 1,
		RaftMultiplier: 0.5, JoinInterval: 100 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		if _, self := s.Leader(); !self {
			return fmt.Errorf("leader exp: this server got: not yet")
		}
		return nil
	})
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.Contains(line, "[ERROR]") {
			t.Errorf("clean shutdown exp: no error logged got: %s", line)
		}
	}
}

type safeBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
