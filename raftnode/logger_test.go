package raftnode

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Raft's struct values reach a JSON log as their text, not as {}.
func TestPlainArgs_JSONShowsRaftValues(t *testing.T) {
	var out strings.Builder
	l := newPlainArgs(hclog.New(&hclog.LoggerOptions{Output: &out, JSONFormat: true}))
	srv := raft.Server{ID: "s2", Address: "127.0.0.1:4647"}
	l.Named("raft").With("local", &srv).Info("added peer", "peer", srv, "n", 3, "err", errors.New("boom"))
	var line map[string]any
	if err := json.Unmarshal([]byte(out.String()), &line); err != nil {
		t.Fatalf("exp: one JSON line got: %v %q", err, out.String())
	}
	for _, k := range []string{"peer", "local"} {
		if s, _ := line[k].(string); !strings.Contains(s, "127.0.0.1:4647") {
			t.Errorf("%s exp: the server's text got: %#v (line %s)", k, line[k], out.String())
		}
	}
	if line["n"] != float64(3) || line["err"] != "boom" || line["@module"] != "raft" {
		t.Errorf("exp: numbers as numbers, errors as text, the name kept got: %s", out.String())
	}
}
