package fsm

import (
	"strings"
	"testing"

	"github.com/claimd/claimd/structs"
)

func TestVolumeRegister_CreatesAndUpdates(t *testing.T) {
	h := mustNewHarness(t)
	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter))
	v := h.volume("v1")
	if v == nil || v.CreateIndex != 1 || v.ModifyIndex != 1 {
		t.Fatalf("exp: v1 at index 1 got: %+v", v)
	}
	if got := h.f.State().TableIndex(TableVolumes); got != 1 {
		t.Fatalf("volumes table index: exp: 1 got: %d", got)
	}

	upd := testVolume("v1", structs.AccessModeMultiNodeReader)
	upd.Name = "renamed"
	h.registerVolumes(upd)
	v = h.volume("v1")
	if v.Name != "renamed" || v.AccessMode != structs.AccessModeMultiNodeReader || v.CreateIndex != 1 || v.ModifyIndex != 2 {
		t.Fatalf("exp: renamed, multi-node-reader-only, create 1, modify 2 got: %+v", v)
	}
}

func TestVolumeRegister_IgnoresClaimsInRequest(t *testing.T) {
	h := mustNewHarness(t)
	in := testVolume("v1", structs.AccessModeSingleNodeWriter)
	in.WriteClaims = map[string]*structs.Claim{"a1": {AllocID: "a1", State: structs.ClaimStateTaken}}
	in.CurrentAccessMode = structs.AccessModeSingleNodeWriter
	h.registerVolumes(in)
	if v := h.volume("v1"); v.HasClaims() || v.CurrentAccessMode != "" {
		t.Fatalf("exp: no claims from a register request got: %+v", v)
	}
}

func TestVolumeRegister_RefusesInvalidAndChangesNothing(t *testing.T) {
	h := mustNewHarness(t)
	h.registerVolumes(testVolume("v0", structs.AccessModeSingleNodeWriter))
	bad := testVolume("v2", "nope")
	err := h.mustRefuse(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{
		Volumes: []*structs.Volume{testVolume("v1", structs.AccessModeSingleNodeWriter), bad},
	}, structs.CodeInvalid)
	if !strings.Contains(err.Error(), "access_mode") {
		t.Fatalf("exp: error naming access_mode got: %v", err)
	}
	if h.volume("v1") != nil {
		t.Fatalf("exp: v1 not registered by a refused batch got: registered")
	}
	h.mustRefuse(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{}, structs.CodeInvalid)
	h.mustRefuse(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{
		Volumes: []*structs.Volume{testVolume("v1", structs.AccessModeSingleNodeWriter), testVolume("v1", structs.AccessModeSingleNodeWriter)},
	}, structs.CodeInvalid)
	h.mustRefuse(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{nil}}, structs.CodeInvalid)
}

func TestVolumeRegister_ClaimedUpdateOnlySafeFields(t *testing.T) {
	for _, tc := range []struct {
		field  string
		change func(v *structs.Volume)
	}{
		{"plugin_id", func(v *structs.Volume) { v.PluginID = "other" }},
		{"external_id", func(v *structs.Volume) { v.ExternalID = "other" }},
		{"access_mode", func(v *structs.Volume) { v.AccessMode = structs.AccessModeMultiNodeMultiWriter }},
		{"attachment_mode", func(v *structs.Volume) { v.AttachmentMode = structs.AttachmentModeBlockDevice }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
			upd := testVolume("v1", structs.AccessModeSingleNodeWriter)
			tc.change(upd)
			err := h.mustRefuse(structs.VolumeRegisterRequestType,
				&structs.VolumeRegisterRequest{Volumes: []*structs.Volume{upd}}, structs.CodeConflict)
			if !strings.HasPrefix(err.(*structs.CodedError).Message, tc.field+":") {
				t.Fatalf("exp: error naming %s got: %v", tc.field, err)
			}
		})
	}

	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	upd := testVolume("v1", structs.AccessModeSingleNodeWriter)
	upd.Name, upd.Parameters, upd.Secrets = "new name", map[string]string{"tier": "slow"}, nil
	upd.MountOptions = &structs.MountOptions{FSType: "xfs"}
	h.registerVolumes(upd)
	v := h.volume("v1")
	if v.Name != "new name" || v.MountOptions.FSType != "xfs" || len(v.WriteClaims) != 1 ||
		v.CurrentAccessMode != structs.AccessModeSingleNodeWriter {
		t.Fatalf("exp: safe fields updated, claim and current modes kept got: %+v", v)
	}
}

func TestVolumeDeregister(t *testing.T) {
	h := mustNewHarness(t)
	h.mustRefuse(structs.VolumeDeregisterRequestType,
		&structs.VolumeDeregisterRequest{VolumeIDs: []string{"nope"}}, structs.CodeNotFound)

	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter), testVolume("v2", structs.AccessModeSingleNodeWriter))
	h.mustRefuse(structs.VolumeDeregisterRequestType,
		&structs.VolumeDeregisterRequest{VolumeIDs: []string{"v1", "nope"}}, structs.CodeNotFound)
	if h.volume("v1") == nil {
		t.Fatalf("exp: v1 kept after a refused deregister got: gone")
	}
	h.mustApply(structs.VolumeDeregisterRequestType, &structs.VolumeDeregisterRequest{VolumeIDs: []string{"v1", "v2"}})
	if h.volume("v1") != nil || h.volume("v2") != nil {
		t.Fatalf("exp: both volumes gone got: still there")
	}
	if got := h.f.State().TableIndex(TableVolumes); got != h.index {
		t.Fatalf("volumes table index after delete: exp: %d got: %d", h.index, got)
	}
}

func TestVolumeDeregister_ClaimedNeedsForceAndTerminalAllocs(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	dereg := &structs.VolumeDeregisterRequest{VolumeIDs: []string{"v1"}}
	h.mustRefuse(structs.VolumeDeregisterRequestType, dereg, structs.CodeConflict)
	force := &structs.VolumeDeregisterRequest{VolumeIDs: []string{"v1"}, Force: true}
	h.mustRefuse(structs.VolumeDeregisterRequestType, force, structs.CodeConflict)

	h.clientUpdate("a1", structs.AllocClientComplete)
	h.mustRefuse(structs.VolumeDeregisterRequestType, dereg, structs.CodeConflict)
	evals, _ := h.f.State().EvalsByVolume(nil, "v1")
	if len(evals) != 1 || evals[0].Status != structs.EvalStatusPending {
		t.Fatalf("exp: one pending eval got: %+v", evals)
	}
	h.mustApply(structs.VolumeDeregisterRequestType, force)
	if h.volume("v1") != nil {
		t.Fatalf("exp: v1 gone got: still there")
	}
	// Its eval went with it: nothing pending is left for the watcher,
	// and the ID no longer finds it.
	if e, _ := h.f.State().EvalByID(nil, evals[0].ID); e != nil {
		t.Fatalf("exp: eval gone with its volume got: %+v", e)
	}
	if pending, _ := h.f.State().EvalsByStatus(nil, structs.EvalStatusPending); len(pending) != 0 {
		t.Fatalf("exp: no pending evals got: %+v", pending)
	}
}

// newClaimedHarness has node n1, volume v1 of the given mode and alloc a1
// on n1 holding a write (or, for reader-only modes, read) claim on it.
func newClaimedHarness(t *testing.T, mode structs.AccessMode) *harness {
	t.Helper()
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerVolumes(testVolume("v1", mode))
	h.placeAllocs(testAlloc("a1", "n1", "v1"))
	cm := structs.ClaimModeWrite
	if mode == structs.AccessModeSingleNodeReader || mode == structs.AccessModeMultiNodeReader {
		cm = structs.ClaimModeRead
	}
	h.mustClaim("v1", "a1", "n1", cm)
	return h
}

// An allocation ID names one run: placing the same allocation again is a
// silent retry while it runs, and refused with its state once it is
// stopped or finished (issue 30: it used to print "placed" and run
// nothing).
func TestAllocPlace_StoppedIDIsRefusedNamingItsState(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter))
	h.placeAllocs(testAlloc("job1", "n1", "v1"))
	h.placeAllocs(testAlloc("job1", "n1", "v1")) // a retry: fine
	h.mustApply(structs.AllocStopRequestType, &structs.AllocStopRequest{AllocIDs: []string{"job1"}})
	err := h.mustRefuse(structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{testAlloc("job1", "n1", "v1")}}, structs.CodeConflict)
	if !strings.Contains(err.Error(), `alloc "job1" exists and is pending (desired stop)`) || !strings.Contains(err.Error(), "new ID") {
		t.Fatalf("re-placing a stopped alloc exp: refused naming its state got: %v", err)
	}
	h.clientUpdate("job1", structs.AllocClientComplete)
	err = h.mustRefuse(structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{testAlloc("job1", "n1", "v1")}}, structs.CodeConflict)
	if !strings.Contains(err.Error(), "is complete") {
		t.Fatalf("re-placing a complete alloc exp: refused naming complete got: %v", err)
	}
}
