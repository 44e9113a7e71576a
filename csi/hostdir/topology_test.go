package hostdir

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

const zoneKey = "topology.hostdir.claimd.io/zone"

func TestTopologyReportedAndHonoured(t *testing.T) {
	p := mustStartPlugin(t, Config{Topology: map[string]string{zoneKey: "a"}})
	c := mustDial(t, p)
	info, err := c.node.NodeGetInfo(ctx(t), &csipb.NodeGetInfoRequest{})
	if err != nil || info.GetAccessibleTopology().GetSegments()[zoneKey] != "a" {
		t.Fatalf("exp: zone a got: %v (%v)", info, err)
	}

	inB := createReq("in-b", 0)
	inB.AccessibilityRequirements = &csipb.TopologyRequirement{Requisite: []*csipb.Topology{{Segments: map[string]string{zoneKey: "b"}}}}
	_, err = c.ctrl.CreateVolume(ctx(t), inB)
	expectCode(t, err, codes.ResourceExhausted)

	inA := createReq("in-a", 0)
	inA.AccessibilityRequirements = &csipb.TopologyRequirement{Requisite: []*csipb.Topology{
		{Segments: map[string]string{zoneKey: "b"}}, {Segments: map[string]string{zoneKey: "a"}},
	}}
	resp, err := c.ctrl.CreateVolume(ctx(t), inA)
	if err != nil || len(resp.GetVolume().GetAccessibleTopology()) != 1 || resp.GetVolume().GetAccessibleTopology()[0].GetSegments()[zoneKey] != "a" {
		t.Fatalf("exp: a volume in zone a got: %v (%v)", resp, err)
	}

	// A node elsewhere cannot reach it: the controller refuses the attach.
	if _, err := New(Config{Root: p.cfg.Root, NodeID: "node-b", Mode: ModeNode, Topology: map[string]string{zoneKey: "b"}}); err != nil {
		t.Fatal(err)
	}
	expectCode(t, publish(t, c, "in-a", "node-b", snw, false), codes.FailedPrecondition)
	if err := publish(t, c, "in-a", "node-1", snw, false); err != nil {
		t.Fatalf("exp: attached in zone a got: %v", err)
	}
}

func TestControllerPublishEnforcesNodeVolumeLimit(t *testing.T) {
	p := mustStartPlugin(t, Config{MaxVolumes: 1})
	c := mustDial(t, p)
	a, b := mustCreateVolume(t, c, "a"), mustCreateVolume(t, c, "b")
	if err := publish(t, c, a, "node-1", snw, false); err != nil {
		t.Fatal(err)
	}
	// The held volume again is no new volume.
	if err := publish(t, c, a, "node-1", snw, false); err != nil {
		t.Fatalf("exp: repeat publish succeeds got: %v", err)
	}
	expectCode(t, publish(t, c, b, "node-1", snw, false), codes.ResourceExhausted)
	if _, err := c.ctrl.ControllerUnpublishVolume(ctx(t), &csipb.ControllerUnpublishVolumeRequest{VolumeId: a, NodeId: "node-1"}); err != nil {
		t.Fatal(err)
	}
	if err := publish(t, c, b, "node-1", snw, false); err != nil {
		t.Fatalf("exp: room after unpublish got: %v", err)
	}
}

func TestTopologyFlag(t *testing.T) {
	s := segments{}
	if err := s.Set("zone=a,rack=r1"); err != nil || s["zone"] != "a" || s["rack"] != "r1" {
		t.Fatalf("exp: zone=a rack=r1 got: %v (%v)", s, err)
	}
	if err := s.Set("zone"); err == nil {
		t.Fatalf("exp: an error for a segment without a value got: %v", s)
	}
}
