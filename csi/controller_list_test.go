package csi

import (
	"errors"
	"strings"
	"testing"

	"github.com/claimd/claimd/csi/hostdir"
	"github.com/claimd/claimd/structs"
)

// ListVolumes returns every volume the plugin has, across pages.
func TestClientListVolumes(t *testing.T) {
	tp := mustNewPlugin(t, nil)
	c := mustClient(t, tp, 0)
	ctx := testCtx(t)
	want := map[string]bool{}
	for _, id := range []string{"l1", "l2", "l3"} {
		want[tp.mustVolume(t, id, structs.AccessModeSingleNodeWriter).ExternalID] = true
	}
	caps, err := c.ControllerGetCapabilities(ctx)
	if err != nil || !caps.ListVolumes {
		t.Fatalf("hostdir exp: LIST_VOLUMES got: %+v %v", caps, err)
	}
	got, err := c.ListVolumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range got {
		delete(want, v.ExternalID)
	}
	if len(want) != 0 {
		t.Fatalf("ListVolumes exp: every volume got: %d listed, missing %v", len(got), want)
	}
}

// Published nodes come back in the listing and from ControllerGetVolume,
// and reflect changes made on the storage behind the CO's back.
func TestClientListVolumesPublishedNodes(t *testing.T) {
	tp := mustNewPlugin(t, nil)
	c := mustClient(t, tp, 0)
	ctx := testCtx(t)
	vol := tp.mustVolume(t, "pn1", structs.AccessModeSingleNodeWriter)
	caps, err := c.ControllerGetCapabilities(ctx)
	if err != nil || !caps.ListPublishedNodes || !caps.GetVolume {
		t.Fatalf("hostdir exp: LIST_VOLUMES_PUBLISHED_NODES and GET_VOLUME got: %+v %v", caps, err)
	}
	if _, err := c.ControllerPublishVolume(ctx, &ControllerPublishRequest{VolumeID: vol.ExternalID, NodeID: "ext-node-1", Capability: CapabilityOf(vol)}); err != nil {
		t.Fatal(err)
	}
	published := func() []string {
		t.Helper()
		got, err := c.ControllerGetVolume(ctx, vol.ExternalID)
		if err != nil {
			t.Fatal(err)
		}
		list, err := c.ListVolumes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range list {
			if v.ExternalID == vol.ExternalID && strings.Join(v.PublishedNodes, ",") != strings.Join(got.PublishedNodes, ",") {
				t.Fatalf("listing and GetVolume exp: agree got: %v and %v", v.PublishedNodes, got.PublishedNodes)
			}
		}
		return got.PublishedNodes
	}
	if got := published(); len(got) != 1 || got[0] != "ext-node-1" {
		t.Fatalf("published nodes exp: [ext-node-1] got: %v", got)
	}
	if err := hostdir.StorageAttach(tp.root, vol.ExternalID, "ext-node-9", false); err != nil {
		t.Fatal(err)
	}
	if err := hostdir.StorageDetach(tp.root, vol.ExternalID, "ext-node-1"); err != nil {
		t.Fatal(err)
	}
	if got := published(); len(got) != 1 || got[0] != "ext-node-9" {
		t.Fatalf("published nodes after changes behind the CO's back exp: [ext-node-9] got: %v", got)
	}
	if _, err := c.ControllerGetVolume(ctx, "no-such-volume"); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("GetVolume of an unknown volume exp: not_found got: %v", err)
	}
}
