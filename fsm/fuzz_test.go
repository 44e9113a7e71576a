package fsm

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/claimd/claimd/structs"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite fsm/testdata/fuzz/FuzzApply from fuzzSeeds")

// fuzzBase is the state every fuzz input is applied to: nodes, a plugin
// with a controller, volumes of three access modes, live claims, a past
// claim with its pending eval. Built once (lazily: package variables are
// set before the init functions that register the commands) and restored
// per input.
var fuzzBase = sync.OnceValue(func() []byte {
	h := mustNewHarness(&panicTB{})
	h.registerNode(testNode("n1"))
	n2 := testNode("n2")
	n2.CSIControllerPlugins = map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true}}
	h.registerNode(n2)
	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter),
		testVolume("v2", structs.AccessModeMultiNodeMultiWriter), testVolume("v3", structs.AccessModeMultiNodeSingleWriter))
	h.placeAllocs(testAlloc("a1", "n1", "v1", "v2"), testAlloc("a2", "n2", "v2", "v3"), testAlloc("a3", "n1", "v3"))
	h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
	h.mustClaim("v2", "a2", "n2", structs.ClaimModeRead)
	h.mustClaim("v3", "a3", "n1", structs.ClaimModeWrite)
	h.clientUpdate("a3", structs.AllocClientComplete) // index 9: v3's eval
	return mustSnapshotBytes(h.t, h.f)
})

// fuzzBaseIndex is the last index in fuzzBase.
const fuzzBaseIndex = 9

// panicTB lets test helpers run outside a test (package init).
type panicTB struct{ testing.TB }

func (*panicTB) Helper()                           {}
func (*panicTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// fuzzSeeds are valid and invalid entries of every type against fuzzBase.
func fuzzSeeds() map[string][]byte {
	enc := func(mt structs.MessageType, req any) []byte {
		data, err := structs.Encode(mt, req)
		if err != nil {
			panic(err)
		}
		return data
	}
	return map[string][]byte{
		"volume-register":    enc(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{testVolume("v4", structs.AccessModeMultiNodeReader)}}),
		"volume-register-ar": enc(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{testVolume("v1", structs.AccessModeMultiNodeReader)}}),
		"volume-deregister":  enc(structs.VolumeDeregisterRequestType, &structs.VolumeDeregisterRequest{VolumeIDs: []string{"v3"}, Force: true}),
		"node-register":      enc(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n3")}),
		"node-down":          enc(structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusDown}),
		"node-deregister":    enc(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n2"}}),
		"alloc-place":        enc(structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{testAlloc("a4", "n2", "v1", "v3")}}),
		"alloc-stop":         enc(structs.AllocStopRequestType, &structs.AllocStopRequest{AllocIDs: []string{"a1"}}),
		"alloc-gc":           enc(structs.AllocGCRequestType, &structs.AllocGCRequest{AllocIDs: []string{"a1", "a2", "a3"}}),
		"alloc-update":       enc(structs.AllocClientUpdateRequestType, &structs.AllocClientUpdateRequest{NodeID: "n1", Allocs: []*structs.AllocClientUpdate{{ID: "a1", ClientStatus: structs.AllocClientFailed}}}),
		"claim-batch": enc(structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{Claims: []*structs.VolumeClaimRequest{
			{VolumeID: "v2", AllocID: "a1", NodeID: "n1", Mode: structs.ClaimModeWrite},
			{VolumeID: "v3", AllocID: "a2", NodeID: "n2", Mode: structs.ClaimModeWrite},
			{VolumeID: "v1", AllocID: "a1", Release: true},
			nil,
		}}),
		"checkpoint": enc(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{VolumeID: "v3", AllocID: "a3",
			State: structs.ClaimStateNodeDetached, ExpectedState: structs.ClaimStateUnpublishing}),
		"checkpoint-force": enc(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1",
			State: structs.ClaimStateFreed, ForcedSkip: true}),
		"eval-upsert": enc(structs.EvalUpsertRequestType, &structs.EvalUpsertRequest{Evals: []*structs.Eval{
			{ID: "e1", Type: structs.EvalTypeVolumeClaimGC, VolumeID: "v3"}}}),
		"eval-complete": enc(structs.EvalCompleteRequestType, &structs.EvalCompleteRequest{
			EvalID: structs.DeriveEvalID(fuzzBaseIndex, "v3"), Status: structs.EvalStatusFailed, StatusDescription: "gone"}),
		"acl-bootstrap": enc(structs.ACLBootstrapRequestType, &structs.ACLBootstrapRequest{NewToken: &structs.ACLToken{
			AccessorID: "t1", SecretID: "0123456789abcdef0123456789abcdef", Type: structs.ACLTokenManagement}}),
		"acl-policy-upsert": enc(structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{
			{Name: "ops", Rules: `volume { policy = "read" }`}}}),
		"acl-policy-delete": enc(structs.ACLPolicyDeleteRequestType, &structs.ACLPolicyDeleteRequest{Names: []string{"ops"}}),
		"acl-token-upsert": enc(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{{
			AccessorID: "t2", SecretID: "fedcba9876543210fedcba9876543210", Type: structs.ACLTokenClient, Policies: []string{"ops"}}}}),
		"acl-token-delete":  enc(structs.ACLTokenDeleteRequestType, &structs.ACLTokenDeleteRequest{AccessorIDs: []string{"t2"}}),
		"unknown-ignorable": {0xff, 0x80},
		"unknown-fatal":     {0x7f, 0x80},
		"truncated":         enc(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{testVolume("v5", structs.AccessModeSingleNodeWriter)}})[:20],
	}
}

// FuzzApply feeds arbitrary entries to Apply on a populated state. The only
// panic allowed is the documented *CorruptEntryError; a refused entry (error
// value) or a corrupt one must leave the state byte-for-byte unchanged; a
// refusal must carry a code; and whatever happens, the claim limits hold
// and the state still round-trips through a snapshot.
func FuzzApply(f *testing.F) {
	// The seeds are the checked-in files of testdata/fuzz/FuzzApply,
	// written from fuzzSeeds (see TestFuzzSeedCorpus).
	base := fuzzBase()
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := New(nil)
		if err := fsm.Restore(io.NopCloser(bytes.NewReader(base))); err != nil {
			t.Fatalf("restore base: %v", err)
		}
		var (
			resp    any
			corrupt bool
		)
		func() {
			defer func() {
				if p := recover(); p != nil {
					if _, ok := p.(*CorruptEntryError); !ok {
						t.Fatalf("exp: no panic but *CorruptEntryError got: %v\n%s", p, debug.Stack())
					}
					corrupt = true
				}
			}()
			resp = fsm.apply(fuzzBaseIndex+1, data)
		}()

		after := mustSnapshotBytes(t, fsm)
		err, refused := resp.(error)
		if refused {
			var ce *structs.CodedError
			if !errors.As(err, &ce) || ce.Code == "" {
				t.Fatalf("refusal: exp: coded error got: %#v", err)
			}
		}
		if (refused || corrupt) && !bytes.Equal(base, after) {
			t.Fatalf("refused or corrupt entry changed the state (%v)", err)
		}
		if br, ok := resp.(*structs.ClaimBatchResponse); ok {
			for i, r := range br.Results {
				refusedItem := r.Error != nil
				if (refusedItem && (r.Claim != nil || r.New)) || (r.New && r.Claim == nil) {
					t.Fatalf("claim result %d: exp: an error alone, or a claim (new or not) got: %+v", i, r)
				}
			}
		}
		vols, _ := fsm.State().Volumes(nil, "")
		for _, v := range vols {
			checkS1(t, v)
			checkClaimMaps(t, v)
		}
		restored := New(nil)
		if err := restored.Restore(io.NopCloser(bytes.NewReader(after))); err != nil {
			t.Fatalf("restore after apply: %v", err)
		}
		if !bytes.Equal(after, mustSnapshotBytes(t, restored)) {
			t.Fatalf("snapshot → restore → snapshot: exp: identical got: different")
		}
	})
}

// TestFuzzSeedCorpus keeps the checked-in corpus in step with fuzzSeeds;
// run with -update-corpus after changing the seeds or the encoding.
func TestFuzzSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzApply")
	for name, data := range fuzzSeeds() {
		path := filepath.Join(dir, "seed-"+name)
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if *updateCorpus {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("%s: exp: current seed got: stale or missing (%v); run go test ./fsm -run TestFuzzSeedCorpus -update-corpus", path, err)
		}
	}
}
