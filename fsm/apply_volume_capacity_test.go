package fsm

import (
	"testing"

	"github.com/claimd/claimd/structs"
)

// An expansion's recorded size only ever grows, keeps the claims, and is
// refused with nothing changed for an unknown volume, a replaced storage
// object or a non-positive size.
func TestVolumeCapacity_OnlyGrowsAndKeepsClaims(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter))
	h.placeAllocs(testAlloc("a1", "n1", "v1"))
	h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)

	grow := func(c int64) *structs.VolumeCapacityRequest {
		return &structs.VolumeCapacityRequest{VolumeID: "v1", ExternalID: "ext-v1", Capacity: c}
	}
	if got := h.mustApply(structs.VolumeCapacityRequestType, grow(2<<20)); got != int64(2<<20) {
		t.Fatalf("grow exp: capacity %d got: %v", 2<<20, got)
	}
	v := h.volume("v1")
	if v.Capacity != 2<<20 || v.ModifyIndex != h.index || v.WriteClaims["a1"] == nil {
		t.Fatalf("grown volume exp: capacity %d at index %d with claim a1 got: %+v", 2<<20, h.index, v)
	}
	// An older, smaller expansion finishing late keeps the larger size and
	// writes nothing.
	idx := v.ModifyIndex
	if got := h.mustApply(structs.VolumeCapacityRequestType, grow(1<<20)); got != int64(2<<20) {
		t.Fatalf("late smaller expansion exp: capacity stays %d got: %v", 2<<20, got)
	}
	if v := h.volume("v1"); v.Capacity != 2<<20 || v.ModifyIndex != idx {
		t.Fatalf("late smaller expansion exp: unchanged volume got: %+v", v)
	}

	h.mustRefuse(structs.VolumeCapacityRequestType, &structs.VolumeCapacityRequest{VolumeID: "nope", ExternalID: "x", Capacity: 5}, structs.CodeNotFound)
	h.mustRefuse(structs.VolumeCapacityRequestType, &structs.VolumeCapacityRequest{VolumeID: "v1", ExternalID: "other", Capacity: 4 << 20}, structs.CodeConflict)
	h.mustRefuse(structs.VolumeCapacityRequestType, grow(0), structs.CodeInvalid)
	h.mustRefuse(structs.VolumeCapacityRequestType, &structs.VolumeCapacityRequest{VolumeID: "../x", ExternalID: "ext-v1", Capacity: 5}, structs.CodeInvalid)
}

// A register entry never changes a known size of the same storage object
// (the capacity entry does, once the plugin grew it): a re-registration
// with a larger, smaller or no size keeps the recorded one, and its other
// changes land. An unknown size (0) takes the spec's, and another storage
// object under the same ID brings its own size.
func TestVolumeRegister_KeepsKnownCapacityOfTheSameStorage(t *testing.T) {
	h := mustNewHarness(t)
	vol := func(ext string, capacity int64, tier string) *structs.Volume {
		v := testVolume("v1", structs.AccessModeSingleNodeWriter)
		v.ExternalID, v.Capacity, v.Parameters = ext, capacity, map[string]string{"tier": tier}
		return v
	}
	h.registerVolumes(vol("ext-v1", 0, "fast"))
	h.registerVolumes(vol("ext-v1", 1<<20, "fast"))
	if got := h.volume("v1").Capacity; got != 1<<20 {
		t.Fatalf("unknown size registered exp: %d got: %d", 1<<20, got)
	}
	for _, c := range []int64{4 << 20, 512 << 10, 0} {
		h.registerVolumes(vol("ext-v1", c, "slow"))
		if v := h.volume("v1"); v.Capacity != 1<<20 || v.Parameters["tier"] != "slow" || v.ModifyIndex != h.index {
			t.Fatalf("re-register with capacity %d exp: capacity %d kept, tier slow at index %d got: %+v", c, 1<<20, h.index, v)
		}
	}
	h.mustApply(structs.VolumeCapacityRequestType, &structs.VolumeCapacityRequest{VolumeID: "v1", ExternalID: "ext-v1", Capacity: 4 << 20})
	h.registerVolumes(vol("ext-v1", 1<<20, "fast"))
	if got := h.volume("v1").Capacity; got != 4<<20 {
		t.Fatalf("re-register after an expansion exp: %d got: %d", 4<<20, got)
	}
	h.registerVolumes(vol("ext-other", 2<<20, "fast"))
	if got := h.volume("v1").Capacity; got != 2<<20 {
		t.Fatalf("another storage object exp: its size %d got: %d", 2<<20, got)
	}
}
