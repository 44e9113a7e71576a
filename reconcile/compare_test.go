package reconcile

import (
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
)

func vol(id string, claims ...*structs.Claim) *structs.Volume {
	v := &structs.Volume{ID: id, ExternalID: "ext-" + id, PluginID: "p",
		WriteClaims: map[string]*structs.Claim{}, ReadClaims: map[string]*structs.Claim{}, PastClaims: map[string]*structs.Claim{}}
	for _, c := range claims {
		switch {
		case c.State != structs.ClaimStateTaken:
			v.PastClaims[c.AllocID] = c
		case c.Mode == structs.ClaimModeWrite:
			v.WriteClaims[c.AllocID] = c
		default:
			v.ReadClaims[c.AllocID] = c
		}
	}
	return v
}

func claim(alloc, extNode string, published bool, state structs.ClaimState) *structs.Claim {
	return &structs.Claim{AllocID: alloc, NodeID: "n-" + extNode, ExternalNodeID: extNode, Mode: structs.ClaimModeWrite,
		State: state, ControllerPublished: published}
}

func kinds(fs []*structs.StorageFinding) map[string]bool {
	out := map[string]bool{}
	for _, f := range fs {
		out[string(f.Kind)+" "+f.ExternalID+" "+f.ExternalNodeID+" "+f.AllocID] = true
	}
	return out
}

func TestCompare(t *testing.T) {
	now := time.Unix(1000, 0)
	taken := structs.ClaimStateTaken
	tests := []struct {
		name          string
		before, after []*structs.Volume
		listed        []*structs.StorageVolume
		want          []string
	}{
		{"agree", []*structs.Volume{vol("v1", claim("a1", "x1", true, taken))}, []*structs.Volume{vol("v1", claim("a1", "x1", true, taken))},
			[]*structs.StorageVolume{{ExternalID: "ext-v1", PublishedNodes: []string{"x1"}}}, nil},
		{"orphan: attached where no claim is", []*structs.Volume{vol("v1")}, []*structs.Volume{vol("v1")},
			[]*structs.StorageVolume{{ExternalID: "ext-v1", PublishedNodes: []string{"x9"}}}, []string{"orphan ext-v1 x9 "}},
		{"a releasing claim explains its attachment", []*structs.Volume{vol("v1", claim("a1", "x1", true, structs.ClaimStateNodeDetached))},
			[]*structs.Volume{vol("v1", claim("a1", "x1", true, structs.ClaimStateNodeDetached))},
			[]*structs.StorageVolume{{ExternalID: "ext-v1", PublishedNodes: []string{"x1"}}}, nil},
		{"a claim taken during the listing is no orphan", []*structs.Volume{vol("v1")}, []*structs.Volume{vol("v1", claim("a1", "x1", true, taken))},
			[]*structs.StorageVolume{{ExternalID: "ext-v1", PublishedNodes: []string{"x1"}}}, nil},
		{"a claim freed during the listing is no orphan", []*structs.Volume{vol("v1", claim("a1", "x1", true, taken))}, []*structs.Volume{vol("v1")},
			[]*structs.StorageVolume{{ExternalID: "ext-v1", PublishedNodes: []string{"x1"}}}, nil},
		{"missing: published claim the storage does not show", []*structs.Volume{vol("v1", claim("a1", "x1", true, taken))},
			[]*structs.Volume{vol("v1", claim("a1", "x1", true, taken))},
			[]*structs.StorageVolume{{ExternalID: "ext-v1"}}, []string{"missing ext-v1 x1 a1"}},
		{"missing also when the storage lost the whole volume", []*structs.Volume{vol("v1", claim("a1", "x1", true, taken))},
			[]*structs.Volume{vol("v1", claim("a1", "x1", true, taken))}, nil, []string{"missing ext-v1 x1 a1"}},
		{"a claim not yet published is not missing", []*structs.Volume{vol("v1", claim("a1", "x1", false, taken))},
			[]*structs.Volume{vol("v1", claim("a1", "x1", true, taken))},
			[]*structs.StorageVolume{{ExternalID: "ext-v1"}}, nil},
		{"a claim released during the listing is not missing", []*structs.Volume{vol("v1", claim("a1", "x1", true, taken))},
			[]*structs.Volume{vol("v1", claim("a1", "x1", true, structs.ClaimStateUnpublishing))},
			[]*structs.StorageVolume{{ExternalID: "ext-v1"}}, nil},
		{"unknown volume listed, known counted", []*structs.Volume{vol("v1")}, []*structs.Volume{vol("v1")},
			[]*structs.StorageVolume{{ExternalID: "ext-v1"}, {ExternalID: "stray"}}, []string{"unknown-volume stray  "}},
		{"a volume registered during the listing is neither", nil, []*structs.Volume{vol("v1")},
			[]*structs.StorageVolume{{ExternalID: "ext-v1", PublishedNodes: []string{"x9"}}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, _ := Compare(Input{PluginID: "p", Before: tc.before, After: tc.after, Listed: tc.listed, PublishedNodes: true, Now: now})
			k := kinds(got)
			if len(k) != len(tc.want) {
				t.Fatalf("findings exp: %v got: %v", tc.want, k)
			}
			for _, w := range tc.want {
				if !k[w] {
					t.Fatalf("findings exp: %v got: %v", tc.want, k)
				}
			}
		})
	}
}

// A finding seen again keeps when it was first seen (a repair's grace
// counts from then); a new one starts now.
func TestCompare_FirstSeenCarriesOver(t *testing.T) {
	v := []*structs.Volume{vol("v1")}
	listed := []*structs.StorageVolume{{ExternalID: "ext-v1", PublishedNodes: []string{"x9", "x8"}}}
	first, known, _ := Compare(Input{Before: v, After: v, Listed: listed, PublishedNodes: true, Now: time.Unix(100, 0)})
	if known != 1 || len(first) != 2 {
		t.Fatalf("first round exp: 2 orphans of 1 known volume got: %d %d", len(first), known)
	}
	prev := &structs.StorageReport{Findings: first[:1]}
	second, _, _ := Compare(Input{Before: v, After: v, Listed: listed, PublishedNodes: true, Previous: prev, Now: time.Unix(200, 0)})
	for _, f := range second {
		want := time.Unix(200, 0)
		if f.Key() == first[0].Key() {
			want = time.Unix(100, 0)
		}
		if !f.FirstSeen.Equal(want) {
			t.Fatalf("finding %s first seen exp: %v got: %v", f.Key(), want, f.FirstSeen)
		}
	}
}

// Unknown volumes are bounded; the rest is counted.
func TestCompare_UnknownBounded(t *testing.T) {
	var listed []*structs.StorageVolume
	for i := 0; i < structs.MaxUnknownVolumes+7; i++ {
		listed = append(listed, &structs.StorageVolume{ExternalID: string(rune('a'+i%26)) + time.Duration(i).String()})
	}
	got, _, truncated := Compare(Input{Listed: listed, Now: time.Unix(1, 0)})
	if len(got) != structs.MaxUnknownVolumes || truncated != 7 {
		t.Fatalf("unknown volumes exp: %d listed, 7 counted got: %d, %d", structs.MaxUnknownVolumes, len(got), truncated)
	}
}

// Without published nodes in the listing nothing about attachments can
// be said: only unknown volumes are reported.
func TestCompare_WithoutPublishedNodesOnlyUnknownVolumes(t *testing.T) {
	v := []*structs.Volume{vol("v1", claim("a1", "x1", true, structs.ClaimStateTaken))}
	got, known, _ := Compare(Input{Before: v, After: v, Listed: []*structs.StorageVolume{{ExternalID: "ext-v1"}, {ExternalID: "stray"}}, Now: time.Unix(1, 0)})
	if known != 1 || len(got) != 1 || got[0].Kind != structs.FindingUnknownVolume {
		t.Fatalf("findings without published nodes exp: the unknown volume only got: %+v", got)
	}
}
