package structs

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Operators read durations in JSON as text; the wire keeps the integer.
func TestRaftHealth_DurationsAreTextInJSONAndIntegersOnTheWire(t *testing.T) {
	in := RaftHealthResponse{Healthy: true, LeaderID: "a", LastContactThreshold: HumanDuration(2 * time.Second),
		Servers: []RaftServerHealth{{ID: "a", LastContact: HumanDuration(1500 * time.Millisecond)}, {ID: "b", LastContact: -1}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"last_contact":"1.5s"`, `"last_contact":"never"`, `"last_contact_threshold":"2s"`, `"index_lag":0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON exp: %s got: %s", want, b)
		}
	}
	var back RaftHealthResponse
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Servers[0].LastContact != in.Servers[0].LastContact || back.Servers[1].LastContact >= 0 || back.LastContactThreshold != in.LastContactThreshold {
		t.Fatalf("JSON round trip exp: %+v got: %+v", in, back)
	}
	if err := json.Unmarshal([]byte(`{"last_contact":"soon"}`), &RaftServerHealth{}); err == nil {
		t.Fatal(`"soon" as a duration exp: an error got: none`)
	}

	wire, err := EncodeMsgpack(&in)
	if err != nil {
		t.Fatal(err)
	}
	var got RaftHealthResponse
	if err := Decode(wire, &got); err != nil {
		t.Fatal(err)
	}
	if got.Servers[0].LastContact != in.Servers[0].LastContact || got.Servers[1].LastContact != -1 || got.LastContactThreshold != in.LastContactThreshold {
		t.Fatalf("msgpack round trip exp: %+v got: %+v", in, got)
	}
}
