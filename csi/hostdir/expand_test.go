package hostdir

import (
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

func TestControllerExpandGrowsAndRefusesShrinking(t *testing.T) {
	p := mustStartPlugin(t, Config{})
	c := mustDial(t, p)
	if _, err := c.ctrl.CreateVolume(ctx(t), createReq("grow", 100)); err != nil {
		t.Fatal(err)
	}
	expand := func(n int64) (*csipb.ControllerExpandVolumeResponse, error) {
		return c.ctrl.ControllerExpandVolume(ctx(t), &csipb.ControllerExpandVolumeRequest{
			VolumeId: "grow", CapacityRange: &csipb.CapacityRange{RequiredBytes: n},
		})
	}
	resp, err := expand(200)
	if err != nil || resp.GetCapacityBytes() != 200 || !resp.GetNodeExpansionRequired() {
		t.Fatalf("exp: 200 bytes, node expansion required got: %v (%v)", resp, err)
	}
	if resp, err := expand(200); err != nil || resp.GetCapacityBytes() != 200 {
		t.Fatalf("exp: a repeat is success got: %v (%v)", resp, err)
	}
	_, err = expand(150)
	expectCode(t, err, codes.OutOfRange)
	list, err := c.ctrl.ListVolumes(ctx(t), &csipb.ListVolumesRequest{})
	if err != nil || list.GetEntries()[0].GetVolume().GetCapacityBytes() != 200 {
		t.Fatalf("exp: the recorded quota is 200 got: %v (%v)", list, err)
	}
}

func TestNodeExpandRecordsSizeWhereStaged(t *testing.T) {
	p := mustStartPlugin(t, Config{MountMethod: MountSymlink})
	c := mustDial(t, p)
	vol := mustCreateVolume(t, c, "staged")
	staging := filepath.Join(t.TempDir(), "staging")
	if _, err := c.node.NodeStageVolume(ctx(t), &csipb.NodeStageVolumeRequest{
		VolumeId: vol, StagingTargetPath: staging, VolumeCapability: mountCap(snw),
	}); err != nil {
		t.Fatal(err)
	}
	req := &csipb.NodeExpandVolumeRequest{VolumeId: vol, VolumePath: staging, CapacityRange: &csipb.CapacityRange{RequiredBytes: 4096}}
	resp, err := c.node.NodeExpandVolume(ctx(t), req)
	if err != nil || resp.GetCapacityBytes() != 4096 {
		t.Fatalf("exp: 4096 bytes got: %v (%v)", resp, err)
	}
	var rec nodeExpansion
	if ok, err := readJSON(p.store.expansionFile("node-1", vol), &rec); !ok || err != nil || rec.CapacityBytes != 4096 {
		t.Fatalf("exp: a record of 4096 bytes got: %+v (%v, %v)", rec, ok, err)
	}
	req.VolumePath = t.TempDir()
	_, err = c.node.NodeExpandVolume(ctx(t), req)
	expectCode(t, err, codes.NotFound)
}

func TestPluginAdvertisesExpansionOnline(t *testing.T) {
	p := mustStartPlugin(t, Config{})
	c := mustDial(t, p)
	caps, err := c.id.GetPluginCapabilities(ctx(t), &csipb.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range caps.GetCapabilities() {
		if pc.GetVolumeExpansion().GetType() == csipb.PluginCapability_VolumeExpansion_ONLINE {
			return
		}
	}
	t.Fatalf("exp: VolumeExpansion ONLINE got: %v", caps)
}
