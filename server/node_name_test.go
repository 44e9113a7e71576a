package server

import (
	"strings"
	"testing"
	"time"
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
