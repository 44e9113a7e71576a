package fsm

import (
	"bytes"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"pgregory.net/rapid"

	"github.com/claimd/claimd/structs"
)

// A server that restarts restores its latest snapshot and applies the log
// after it; one that never restarted applied the whole log. S2 needs the
// two to hold the same state at every index, so nothing may live outside
// what a snapshot carries, and a restored state must go on changing as the
// applied one does (derived fields, maps emptied or nil, times as decoded).

// leaderTimes gives each entry a leader's append time, in a zone other than
// UTC and with nanoseconds, as raft.Log.AppendedAt carries it: claim steps
// record it, and a restored state holds it as decoded.
func leaderTimes(index uint64) time.Time {
	base := time.Date(2026, 12, 7, 10, 0, 0, 123456789, time.FixedZone("CET", 3600))
	return base.Add(time.Duration(index) * 1001 * time.Microsecond)
}

// restartFrom is a server restart: the snapshot raft would persist (Persist
// into a snapshot store's sink) restored into a new state machine.
func restartFrom(t fataler, f *FSM, index uint64) *FSM {
	t.Helper()
	store := raft.NewInmemSnapshotStore()
	sink, err := store.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 0, nil)
	if err != nil {
		t.Fatalf("snapshot sink: %v", err)
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("persist: %v", err)
	}
	snap.Release()
	_, rc, err := store.Open(sink.ID())
	if err != nil {
		t.Fatalf("open snapshot: %v", err)
	}
	restarted := New(nil)
	if err := restarted.Restore(rc); err != nil {
		t.Fatalf("restore: %v", err)
	}
	return restarted
}

func mustDigest(t fataler, f *FSM) *structs.StateDigest {
	t.Helper()
	d, err := f.State().Digest()
	if err != nil {
		t.Fatalf("digest: %v", err)
	}
	return d
}

// TestClaimStateMachine_RestartedTwinKeepsTheSameState drives the random
// histories of TestClaimStateMachine_Properties, with leader times on the
// entries, and restarts the twin at random points: after every step both
// digests are equal, index and hash. At the end the whole log is applied
// once more by a third state machine that restarts at a random index in
// the middle, and ends with the same digest too.
func TestClaimStateMachine_RestartedTwinKeepsTheSameState(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := &propRun{t: t, f: New(nil), twin: New(nil), m: newModel(), prev: map[claimKey]structs.ClaimState{}, at: leaderTimes}
		r.setup(t)
		t.Repeat(map[string]func(*rapid.T){
			"registerVolume":   r.registerVolume,
			"deregisterVolume": r.deregisterVolume,
			"registerNode":     r.registerNode,
			"nodeDown":         r.nodeDown,
			"deregisterNode":   r.deregisterNode,
			"place":            r.place,
			"placeNew":         r.placeNew,
			"stop":             r.stop,
			"clientUpdate":     r.clientUpdate,
			"claimBatch":       r.claimBatch,
			"claimBatch2":      r.claimBatch,
			"checkpoint":       r.checkpoint,
			"checkpoint2":      r.checkpoint,
			"upsertEval":       r.upsertEval,
			"completeEval":     r.completeEval,
			"restartTwin": func(t *rapid.T) {
				r.twin = restartFrom(t, r.twin, r.index)
				r.restarted = true
			},
			"": func(t *rapid.T) {
				if a, b := mustDigest(t, r.f), mustDigest(t, r.twin); *a != *b {
					t.Fatalf("S2 after index %d (twin restarted: %v): exp: %+v got: %+v", r.index, r.restarted, a, b)
				}
			},
		})

		replay := New(nil)
		cut := rapid.IntRange(0, len(r.log)).Draw(t, "restart at")
		for i, e := range r.log {
			if i == cut {
				replay = restartFrom(t, replay, e.index-1)
			}
			replay.applyAt(e.index, e.at, e.data)
		}
		if a, b := mustSnapshotBytes(t, r.f), mustSnapshotBytes(t, replay); !bytes.Equal(a, b) {
			t.Fatalf("S2: the log replayed with a restart after %d of %d entries exp: the same snapshot got: %d and %d bytes",
				cut, len(r.log), len(a), len(b))
		}
	})
}

// TestDigest_IndexAndHashDescribeOneState: the digest's index is the last
// entry that changed the state, and entries that change nothing (a
// refusal) leave digest and index alone.
func TestDigest_IndexAndHashDescribeOneState(t *testing.T) {
	f := New(nil)
	if d := mustDigest(t, f); d.AppliedIndex != 0 || d.SHA256 == "" || d.Bytes == 0 {
		t.Fatalf("empty state exp: index 0 and a hash got: %+v", d)
	}
	f.apply(1, mustEncode(t, structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{testVolume("v1", structs.AccessModeSingleNodeWriter)}}))
	d1 := mustDigest(t, f)
	if d1.AppliedIndex != 1 {
		t.Fatalf("after a register at 1 exp: index 1 got: %+v", d1)
	}
	// Refused (no such volume): nothing changes.
	f.apply(2, mustEncode(t, structs.VolumeDeregisterRequestType, &structs.VolumeDeregisterRequest{VolumeIDs: []string{"nope"}}))
	if d2 := mustDigest(t, f); *d2 != *d1 {
		t.Fatalf("after a refused entry exp: %+v got: %+v", d1, d2)
	}
	var buf bytes.Buffer
	if err := f.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	if int64(buf.Len()) != d1.Bytes {
		t.Fatalf("digest bytes exp: the snapshot's %d got: %d", buf.Len(), d1.Bytes)
	}
}
