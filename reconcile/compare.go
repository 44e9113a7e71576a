// Package reconcile compares claimd's record of a plugin's attachments
// with what the plugin's controller reports (issue 27): attachments the
// storage has that no claim explains (orphans), attachments a live claim
// is recorded with that the storage does not have (missing), and volumes
// the storage has that claimd does not know. It decides nothing about
// repairs and writes nothing; the leader's reconciler does (watcher).
package reconcile

import (
	"sort"
	"strings"
	"time"

	"github.com/claimd/claimd/structs"
)

// Input is one round's view of both sides. A listing takes time, and
// claims come and go meanwhile: Before is the plugin's volumes as the
// state held them before the listing started, After as it held them once
// it ended. A disagreement counts only if it holds against both, so a
// claim taken or freed during the listing is never reported.
type Input struct {
	PluginID      string
	Before, After []*structs.Volume
	Listed        []*structs.StorageVolume
	// Nodes maps the plugin's node IDs to claimd's node IDs.
	Nodes map[string]string
	// Health are the storage's adverse conditions by external ID.
	Health map[string][]string
	// PublishedNodes: the listing reports published nodes. Without them
	// attachments cannot be compared (an empty list means nothing), and
	// only unknown volumes are found.
	PublishedNodes bool
	// Previous is the last round's report: a finding seen again keeps
	// its FirstSeen.
	Previous *structs.StorageReport
	Now      time.Time
}

// Compare returns the findings of one round, in a stable order.
func Compare(in Input) (findings []*structs.StorageFinding, known, unknownTruncated int) {
	before, after := byExternalID(in.Before), byExternalID(in.After)
	prev := map[string]time.Time{}
	if in.Previous != nil {
		for _, f := range in.Previous.Findings {
			prev[f.Key()] = f.FirstSeen
		}
	}
	add := func(f *structs.StorageFinding) {
		f.FirstSeen = in.Now
		if seen, ok := prev[f.Key()]; ok {
			f.FirstSeen = seen
		}
		findings = append(findings, f)
	}
	var unknown []*structs.StorageVolume
	listed := map[string]*structs.StorageVolume{}
	for _, lv := range in.Listed {
		listed[lv.ExternalID] = lv
		vb, va := before[lv.ExternalID], after[lv.ExternalID]
		if vb == nil && va == nil {
			unknown = append(unknown, lv)
			continue
		}
		known++
		if va != nil && len(in.Health[lv.ExternalID]) > 0 {
			add(&structs.StorageFinding{Kind: structs.FindingAbnormal, VolumeID: va.ID, ExternalID: lv.ExternalID,
				Message: truncateMessage(strings.Join(in.Health[lv.ExternalID], "; "))})
		}
		if vb == nil || va == nil || !in.PublishedNodes {
			continue // registered or deregistered during the listing
		}
		explainedB, explainedA := claimNodes(vb), claimNodes(va)
		for _, ext := range lv.PublishedNodes {
			if explainedB[ext] || explainedA[ext] {
				continue
			}
			add(&structs.StorageFinding{Kind: structs.FindingOrphan, VolumeID: va.ID, ExternalID: lv.ExternalID,
				NodeID: in.Nodes[ext], ExternalNodeID: ext})
		}
	}
	// Missing: a live claim published before the listing began and still
	// live after it ended, whose node the listing does not show.
	for _, ext := range sortedKeys(before) {
		vb, va := before[ext], after[ext]
		if va == nil || !in.PublishedNodes {
			continue
		}
		lv := listed[ext]
		published := map[string]bool{}
		if lv != nil {
			for _, n := range lv.PublishedNodes {
				published[n] = true
			}
		}
		for _, cb := range liveClaims(vb) {
			ca := findLive(va, cb.AllocID)
			if !cb.ControllerPublished || ca == nil || !ca.ControllerPublished || cb.ExternalNodeID == "" || published[cb.ExternalNodeID] {
				continue
			}
			add(&structs.StorageFinding{Kind: structs.FindingMissing, VolumeID: va.ID, ExternalID: ext,
				NodeID: cb.NodeID, ExternalNodeID: cb.ExternalNodeID, AllocID: cb.AllocID})
		}
	}
	sort.Slice(unknown, func(i, j int) bool { return unknown[i].ExternalID < unknown[j].ExternalID })
	if len(unknown) > structs.MaxUnknownVolumes {
		unknownTruncated = len(unknown) - structs.MaxUnknownVolumes
		unknown = unknown[:structs.MaxUnknownVolumes]
	}
	for _, lv := range unknown {
		add(&structs.StorageFinding{Kind: structs.FindingUnknownVolume, ExternalID: lv.ExternalID})
	}
	sort.SliceStable(findings, func(i, j int) bool { return findings[i].Key() < findings[j].Key() })
	if len(findings) > structs.MaxStorageFindings {
		findings = findings[:structs.MaxStorageFindings]
	}
	return findings, known, unknownTruncated
}

func truncateMessage(s string) string {
	const max = 1024
	if len(s) > max {
		return s[:max]
	}
	return s
}

func sortedKeys(m map[string]*structs.Volume) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// byExternalID indexes a plugin's volumes by the storage's volume ID.
func byExternalID(vols []*structs.Volume) map[string]*structs.Volume {
	out := make(map[string]*structs.Volume, len(vols))
	for _, v := range vols {
		if v.ExternalID != "" {
			out[v.ExternalID] = v
		}
	}
	return out
}

// claimNodes are the plugin node IDs a volume's claims, live or being
// released, explain an attachment on. A claim being released may still be
// attached: its controller detach has not run yet.
func claimNodes(v *structs.Volume) map[string]bool {
	out := map[string]bool{}
	for _, c := range v.AllClaims() {
		if c.ExternalNodeID != "" {
			out[c.ExternalNodeID] = true
		}
	}
	return out
}

// liveClaims are a volume's live claims in alloc ID order.
func liveClaims(v *structs.Volume) []*structs.Claim {
	out := make([]*structs.Claim, 0, len(v.WriteClaims)+len(v.ReadClaims))
	for _, m := range []map[string]*structs.Claim{v.WriteClaims, v.ReadClaims} {
		for _, c := range m {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AllocID < out[j].AllocID })
	return out
}

func findLive(v *structs.Volume, allocID string) *structs.Claim {
	if c := v.WriteClaims[allocID]; c != nil {
		return c
	}
	return v.ReadClaims[allocID]
}
