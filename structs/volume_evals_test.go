package structs

import (
	"encoding/json"
	"strings"
	"testing"
)

// A volume's evals are the state store's (decision 41): no RPC answer,
// log entry or HTTP body carries them with the volume.
func TestVolume_EvalsAreNeverEncoded(t *testing.T) {
	v := &Volume{ID: "v1", Evals: []*Eval{{ID: "e1", VolumeID: "v1", Status: EvalStatusPending}}}
	buf, err := Encode(VolumeRegisterRequestType, &VolumeRegisterRequest{Volumes: []*Volume{v}})
	if err != nil {
		t.Fatal(err)
	}
	var back VolumeRegisterRequest
	if err := Decode(buf[1:], &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Volumes) != 1 || back.Volumes[0].ID != "v1" || back.Volumes[0].Evals != nil {
		t.Fatalf("msgpack: exp: the volume without its evals got: %+v", back.Volumes)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), "e1") {
		t.Fatalf("json: exp: no evals got: %s", js)
	}
	if c := v.Copy(); len(c.Evals) != 1 || &c.Evals[0] == &v.Evals[0] {
		t.Fatalf("copy: exp: its own slice of the same evals got: %+v", c.Evals)
	}
}

// Secrets marshal redacted and readable, without HTML escapes: the HTTP
// API and the CLI show "<redacted>" for volumes as for nodes (issue 30).
func TestSecrets_RedactedReadableInJSON(t *testing.T) {
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // as httpapi.writeJSON and the CLI's -json
	if err := enc.Encode(&Volume{ID: "v", Secrets: Secrets{"token": "s3cret"}}); err != nil {
		t.Fatal(err)
	}
	b := buf.String()
	if strings.Contains(b, "s3cret") || !strings.Contains(b, `"secrets":{"token":"<redacted>"}`) {
		t.Fatalf("exp: the secret redacted as \"<redacted>\" got: %s", b)
	}
}
