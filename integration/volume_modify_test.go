package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// ModifyVolume (issue 27): the controller changes the mutable parameters
// and claimd records what it accepted; a key the plugin refuses changes
// nothing and the error names it.
func TestVolumeModify_RecordsWhatThePluginAccepted(t *testing.T) {
	e := newReleaseEnv(t, "w1")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	if err := os.MkdirAll(filepath.Join(e.root, "volumes", "ext-v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := e.api.ModifyVolume(harness.Ctx(t, 30*time.Second), "v1", map[string]string{"tier": "fast", "iops": "3000"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Volume == nil || out.Volume.MutableParameters["tier"] != "fast" || out.Volume.MutableParameters["iops"] != "3000" {
		t.Fatalf("modified volume exp: tier=fast iops=3000 recorded got: %+v", out.Volume)
	}
	meta, _ := os.ReadFile(filepath.Join(e.root, "meta", "ext-v1.json"))
	if !strings.Contains(string(meta), `"tier":"fast"`) {
		t.Fatalf("plugin's record exp: tier=fast got: %s", meta)
	}
	before, _, _ := e.api.Volume(harness.Ctx(t, 10*time.Second), "v1", structs.QueryOptions{})
	_, err = e.api.ModifyVolume(harness.Ctx(t, 30*time.Second), "v1", map[string]string{"colour": "blue"})
	if err == nil || !strings.Contains(err.Error(), `"colour" is not mutable`) {
		t.Fatalf("unknown mutable key exp: refused naming it got: %v", err)
	}
	after, _, _ := e.api.Volume(harness.Ctx(t, 10*time.Second), "v1", structs.QueryOptions{})
	if after.ModifyIndex != before.ModifyIndex || after.MutableParameters["colour"] != "" {
		t.Fatalf("refused modification exp: nothing recorded got: %+v", after.MutableParameters)
	}
	if _, err := e.api.ModifyVolume(harness.Ctx(t, 30*time.Second), "nope", map[string]string{"tier": "x"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("unknown volume exp: not_found got: %v", err)
	}
	// The record survives a re-register of the same storage object.
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	again, _, _ := e.api.Volume(harness.Ctx(t, 10*time.Second), "v1", structs.QueryOptions{})
	if again.MutableParameters["tier"] != "fast" {
		t.Fatalf("mutable parameters after a re-register exp: kept got: %+v", again.MutableParameters)
	}
}
