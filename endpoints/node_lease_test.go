package endpoints

import (
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// recordingBeats keeps the receive times the endpoints report.
type recordingBeats struct {
	mu       sync.Mutex
	received map[string]time.Time
}

func (b *recordingBeats) Reset(string)  {}
func (b *recordingBeats) Remove(string) {}
func (b *recordingBeats) Received(id string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.received[id] = at
}

// A heartbeat renews the node's lease only when this server leads and a
// quorum confirmed it after the heartbeat arrived; the lease clock starts
// at the receive time, taken before the confirmation.
func TestNodeUpdateStatus_RenewsTheLeaseOnlyFromAConfirmedLeader(t *testing.T) {
	w := newWorld(t, true)
	beats := &recordingBeats{received: map[string]time.Time{}}
	w.deps.Heartbeats = beats
	w.state.Must(t, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: &structs.Node{ID: "n1", SecretID: "s-n1",
		Status: structs.NodeStatusReady, Lease: 6 * time.Second}})
	node := w.receivers(w.conn(tlsutil.RoleClient))["Node"].(*Node)
	beat := func() (structs.NodeUpdateResponse, error) {
		var reply structs.NodeUpdateResponse
		err := node.UpdateStatus(&structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusReady,
			WriteRequest: structs.WriteRequest{AuthToken: "s-n1"}}, &reply)
		return reply, err
	}
	before := time.Now()
	reply, err := beat()
	if err != nil || reply.Lease != 6*time.Second {
		t.Fatalf("confirmed leader exp: lease 6s renewed got: %v %v", reply.Lease, err)
	}
	if at := beats.received["n1"]; at.Before(before) || at.After(time.Now()) {
		t.Fatalf("exp: lease clock started at the receive time got: %s", at)
	}
	// A leader that a quorum no longer confirms (deposed, not yet aware)
	// answers the heartbeat but renews nothing.
	w.cluster.verifyErr = structs.ErrNoLeader
	if reply, err = beat(); err != nil || reply.Lease != 0 {
		t.Fatalf("unconfirmed leader exp: answered, no lease got: %v %v", reply.Lease, err)
	}
	// A node without a lease is never given one.
	w.cluster.verifyErr = nil
	var r2 structs.NodeUpdateResponse
	if err := node.UpdateStatus(&structs.NodeUpdateStatusRequest{NodeID: "n2", Status: structs.NodeStatusReady,
		WriteRequest: structs.WriteRequest{AuthToken: "s-n2"}}, &r2); err != nil || r2.Lease != 0 {
		t.Fatalf("node without a lease exp: none got: %v %v", r2.Lease, err)
	}
}
