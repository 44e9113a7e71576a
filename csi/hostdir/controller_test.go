package hostdir

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/claimd/claimd/internal/testutil"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	snw  = csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	mnmw = csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	mnsw = csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER
)

func mustCreateVolume(t *testing.T, c clients, name string) string {
	t.Helper()
	resp, err := c.ctrl.CreateVolume(ctx(t), &csipb.CreateVolumeRequest{
		Name: name, VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
	})
	if err != nil {
		t.Fatalf("exp: volume created got: %v", err)
	}
	return resp.GetVolume().GetVolumeId()
}

// registerNode makes a node known under root the way a node plugin does
// when it starts, without serving.
func registerNode(t *testing.T, root, nodeID string) {
	t.Helper()
	if _, err := New(Config{Root: root, NodeID: nodeID, Mode: ModeNode}); err != nil {
		t.Fatal(err)
	}
}

func publish(t *testing.T, c clients, vol, node string, mode csipb.VolumeCapability_AccessMode_Mode, ro bool) error {
	t.Helper()
	_, err := c.ctrl.ControllerPublishVolume(ctx(t), &csipb.ControllerPublishVolumeRequest{
		VolumeId: vol, NodeId: node, VolumeCapability: mountCap(mode), Readonly: ro,
	})
	return err
}

func expectCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("exp: %s got: %s (%v)", want, got, err)
	}
}

func TestControllerPublishRefusesSecondNodeForSingleNodeVolume(t *testing.T) {
	p := mustStartPlugin(t, Config{})
	registerNode(t, p.cfg.Root, "node-2")
	c := mustDial(t, p)
	vol := mustCreateVolume(t, c, "single")

	expectCode(t, publish(t, c, vol, "node-1", snw, false), codes.OK)
	expectCode(t, publish(t, c, vol, "node-2", snw, false), codes.FailedPrecondition)
	// A multi-node request does not get around a single-node attachment.
	expectCode(t, publish(t, c, vol, "node-2", mnmw, false), codes.FailedPrecondition)

	// Once detached from node-1 it may go to node-2.
	if _, err := c.ctrl.ControllerUnpublishVolume(ctx(t), &csipb.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: "node-1"}); err != nil {
		t.Fatal(err)
	}
	expectCode(t, publish(t, c, vol, "node-2", snw, false), codes.OK)
}

func TestControllerPublishMultiNodeModes(t *testing.T) {
	p := mustStartPlugin(t, Config{})
	registerNode(t, p.cfg.Root, "node-2")
	registerNode(t, p.cfg.Root, "node-3")
	c := mustDial(t, p)

	multi := mustCreateVolume(t, c, "multi")
	expectCode(t, publish(t, c, multi, "node-1", mnmw, false), codes.OK)
	expectCode(t, publish(t, c, multi, "node-2", mnmw, false), codes.OK)

	oneWriter := mustCreateVolume(t, c, "one-writer")
	expectCode(t, publish(t, c, oneWriter, "node-1", mnsw, false), codes.OK)
	expectCode(t, publish(t, c, oneWriter, "node-2", mnsw, true), codes.OK)
	expectCode(t, publish(t, c, oneWriter, "node-3", mnsw, false), codes.FailedPrecondition)
}

func TestControllerPublishIdempotentAndIncompatible(t *testing.T) {
	p := mustStartPlugin(t, Config{})
	c := mustDial(t, p)
	vol := mustCreateVolume(t, c, "again")
	expectCode(t, publish(t, c, vol, "node-1", snw, false), codes.OK)
	expectCode(t, publish(t, c, vol, "node-1", snw, false), codes.OK)
	expectCode(t, publish(t, c, vol, "node-1", snw, true), codes.AlreadyExists)
	expectCode(t, publish(t, c, vol, "no-such-node", snw, false), codes.NotFound)
	expectCode(t, publish(t, c, "no-such-volume", "node-1", snw, false), codes.NotFound)
}

// TestControllerAttachmentsSurviveRestart: the attachment record is on disk,
// so a plugin restarted on the same root still refuses a second node.
func TestControllerAttachmentsSurviveRestart(t *testing.T) {
	root := filepath.Join(testutil.TempDir(t), "root")
	first := mustStartPlugin(t, Config{Root: root})
	registerNode(t, root, "node-2")
	c := mustDial(t, first)
	vol := mustCreateVolume(t, c, "persisted")
	expectCode(t, publish(t, c, vol, "node-1", snw, false), codes.OK)
	first.Stop()

	second := mustStartPlugin(t, Config{Root: root})
	c = mustDial(t, second)
	expectCode(t, publish(t, c, vol, "node-2", snw, false), codes.FailedPrecondition)
	_, err := c.ctrl.DeleteVolume(ctx(t), &csipb.DeleteVolumeRequest{VolumeId: vol})
	expectCode(t, err, codes.FailedPrecondition)
}

// TestControllerPublishRaceAcrossPlugins: two plugin instances share a root
// (as controllers on two machines share storage) and race to attach one
// single-node volume to different nodes. The flock lets exactly one win.
func TestControllerPublishRaceAcrossPlugins(t *testing.T) {
	root := filepath.Join(testutil.TempDir(t), "root")
	a := mustStartPlugin(t, Config{Root: root, NodeID: "node-a"})
	b := mustStartPlugin(t, Config{Root: root, NodeID: "node-b"})
	ca, cb := mustDial(t, a), mustDial(t, b)

	for i := 0; i < 20; i++ {
		vol := mustCreateVolume(t, ca, fmt.Sprintf("race-%d", i))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, c := range []clients{ca, cb} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[j] = publish(t, c, vol, []string{"node-a", "node-b"}[j], snw, false)
			}()
		}
		wg.Wait()
		wins := 0
		for _, err := range errs {
			switch status.Code(err) {
			case codes.OK:
				wins++
			case codes.FailedPrecondition:
			default:
				t.Fatalf("exp: OK or FailedPrecondition got: %v", err)
			}
		}
		if wins != 1 {
			t.Fatalf("exp: exactly one attach wins got: %d (%v)", wins, errs)
		}
	}
}

func TestCreateVolumeIDs(t *testing.T) {
	p := mustStartPlugin(t, Config{})
	c := mustDial(t, p)
	if got := mustCreateVolume(t, c, "plain-name"); got != "plain-name" {
		t.Fatalf("exp: plain-name got: %s", got)
	}
	odd := mustCreateVolume(t, c, "has/slash and space")
	if !validID(odd) || odd != mustCreateVolume(t, c, "has/slash and space") {
		t.Fatalf("exp: a stable safe ID got: %q", odd)
	}
	_, err := c.ctrl.CreateVolume(ctx(t), &csipb.CreateVolumeRequest{
		Name: "block", VolumeCapabilities: []*csipb.VolumeCapability{{
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: snw},
			AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		}},
	})
	expectCode(t, err, codes.InvalidArgument)
}
