package hostdir

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/testutil"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// mustStartPlugin starts a plugin on a socket in a fresh directory and
// stops it when the test ends. Unset Endpoint and Mode get defaults.
func mustStartPlugin(t *testing.T, cfg Config) *Plugin {
	t.Helper()
	if cfg.Endpoint == "" {
		// Socket paths are limited to 108 bytes; t.TempDir paths with long
		// test names can exceed that, so sockets live in a short dir.
		sockDir, err := os.MkdirTemp("", "hd")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(sockDir) })
		cfg.Endpoint = "unix://" + filepath.Join(sockDir, "csi.sock")
	}
	if cfg.Root == "" {
		cfg.Root = filepath.Join(testutil.TempDir(t), "root")
	}
	if cfg.NodeID == "" {
		cfg.NodeID = "node-1"
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "hostdir", Level: hclog.Warn, Output: testWriter{t}})
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("exp: plugin created got: %v", err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("exp: plugin started got: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}

func mustSocket(t *testing.T, p *Plugin) string {
	t.Helper()
	path, err := socketPath(p.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// clients dials a plugin with the raw CSI stubs.
type clients struct {
	id   csipb.IdentityClient
	ctrl csipb.ControllerClient
	node csipb.NodeClient
}

func mustDial(t *testing.T, p *Plugin) clients {
	t.Helper()
	conn, err := grpc.NewClient("unix:"+mustSocket(t, p),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("localhost"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return clients{csipb.NewIdentityClient(conn), csipb.NewControllerClient(conn), csipb.NewNodeClient(conn)}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func mountCap(mode csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
	}
}

// testWriter sends plugin logs to the test log, shown on failure only.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(b))
	return len(b), nil
}
