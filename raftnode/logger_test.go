package raftnode

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// hashicorp/raft logs some values with hclog.Fmt; they reached the log as
// `percent-complete="[%0.2f%% 100]"`.
func TestPlainArgsAppliesHclogFormats(t *testing.T) {
	var buf bytes.Buffer
	l := newPlainArgs(hclog.New(&hclog.LoggerOptions{Output: &buf, JSONFormat: true}))
	l.Info("restoring", "percent-complete", hclog.Fmt("%0.2f%%", 100.0), "servers", hclog.Fmt("%+v", []string{"a", "b"}))
	out := buf.String()
	if !strings.Contains(out, `"percent-complete":"100.00%"`) || !strings.Contains(out, `"servers":"[a b]"`) {
		t.Fatalf("log line: %s", out)
	}
}
