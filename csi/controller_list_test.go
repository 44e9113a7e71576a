package csi

import (
	"testing"

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
