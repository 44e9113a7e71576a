package fsm

import (
	"maps"
	"slices"

	"github.com/claimd/claimd/structs"
)

// cowVolume copies a volume for a claim change: the claim maps are cloned
// so they can be edited, but the claims in them and the spec's maps are
// shared, since nobody mutates a stored object. Changing one claim of a
// volume with many then costs a map clone, not a deep copy of every claim.
// A claim to be changed is replaced by its own Copy.
func cowVolume(v *structs.Volume, index uint64) *structs.Volume {
	c := *v
	c.ReadClaims = maps.Clone(v.ReadClaims)
	c.WriteClaims = maps.Clone(v.WriteClaims)
	c.PastClaims = maps.Clone(v.PastClaims)
	c.ModifyIndex = index
	return &c
}

// makePast moves an alloc's live claim on v (a cowVolume copy) to the past
// claims in state unpublishing. It reports whether there was one.
func makePast(tx *txn, v *structs.Volume, allocID string) bool {
	c := v.LiveClaim(allocID)
	if c == nil {
		return false
	}
	past := c.WithStep(structs.ClaimStateUnpublishing, tx.index, tx.at)
	delete(v.ReadClaims, allocID)
	delete(v.WriteClaims, allocID)
	if v.PastClaims == nil {
		v.PastClaims = map[string]*structs.Claim{}
	}
	v.PastClaims[allocID] = past
	tidyClaims(v)
	return true
}

// keepReleased appends a freed claim to the volume's short history (a
// cowVolume copy), dropping the oldest beyond MaxReleasedClaims.
func keepReleased(v *structs.Volume, freed *structs.Claim) {
	keep := append(slices.Clip(v.Released), freed)
	if n := len(keep) - structs.MaxReleasedClaims; n > 0 {
		keep = keep[n:]
	}
	v.Released = keep
}

// tidyClaims drops empty claim maps (so a volume's encoding does not depend
// on its history) and resets the current modes once the last claim, live
// or past, is gone.
func tidyClaims(v *structs.Volume) {
	if len(v.ReadClaims) == 0 {
		v.ReadClaims = nil
	}
	if len(v.WriteClaims) == 0 {
		v.WriteClaims = nil
	}
	if len(v.PastClaims) == 0 {
		v.PastClaims = nil
	}
	if !v.HasClaims() {
		v.CurrentAccessMode, v.CurrentAttachmentMode = "", ""
	}
}

// releaseAllocClaims turns every live claim of a terminal alloc into a past
// claim and queues one pending eval per volume it claimed, live or past
// (docs/architecture.md, the release state machine: in the same Apply as
// the terminal status).
func releaseAllocClaims(tx *txn, a *structs.Alloc, trigger string) {
	releaseAllocClaimsDetached(tx, a, trigger, "", nil)
}

// releaseAllocClaimsDetached is releaseAllocClaims with the node's word
// that it node-detached the volumes in detached (AllocClientUpdate.
// DetachedVolumes): a live claim of node on one of them passes
// node-detached in this entry (releaseDetached). It returns how many did.
func releaseAllocClaimsDetached(tx *txn, a *structs.Alloc, trigger, node string, detached []string) int {
	honoured := 0
	ids := make([]string, 0, len(a.Volumes))
	for _, r := range a.Volumes {
		ids = append(ids, r.VolumeID)
	}
	for _, id := range sortedUnique(ids) {
		old := getVolume(tx, id)
		if old == nil || old.Claim(a.ID) == nil {
			continue
		}
		if old.LiveClaim(a.ID) == nil && pendingEval(old) != nil {
			continue // already past, and its release already under way
		}
		v := cowVolume(old, tx.index)
		live := old.LiveClaim(a.ID)
		makePast(tx, v, a.ID)
		if live != nil && slices.Contains(detached, id) && holderSays(tx, live, node) {
			releaseDetached(tx, v, a.ID)
			honoured++
			continue
		}
		ensurePendingEval(tx, v, trigger)
		tx.put(TableVolumes, v)
	}
	return honoured
}
