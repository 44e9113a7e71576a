package hostdir

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
)

// Plugin is a hostdir CSI plugin.
//
// Concurrency: gRPC calls arrive on many goroutines. Controller calls that
// change state are serialised by ctrlMu within the process and by an flock
// across processes, except ControllerPublish and ControllerUnpublish, which
// take only their volume's flock (and the shared one: store.lockVolume);
// node calls by their volume's lock (nodeLocks). Fault injection and the audit log
// have their own locks. Start, Serve and Stop may be called from any
// goroutine; Stop is idempotent and waits for calls in flight, whose
// contexts it cancels.
type Plugin struct {
	cfg     Config
	logger  hclog.Logger
	store   store
	mounter *mounter
	faults  *faults
	audit   *auditLog
	srv     *grpc.Server

	ctrlMu    sync.Mutex
	nodeLocks volumeLocks
	// swTargets is where each single-node-single-writer volume is
	// published on this node (one target path at a time), under swMu.
	swMu      sync.Mutex
	swTargets map[string]string

	// exit is what a control file's "exit" does: stop serving here, exit
	// the process under Main.
	exit func()

	mu        sync.Mutex
	serveDone chan struct{} // closed when Start's Serve returns; nil before Start
	stopOnce  sync.Once
	stopped   chan struct{}
}

// New checks the configuration, prepares Root and, for node and monolith
// modes, registers the node under Root so controllers accept it.
func New(cfg Config) (*Plugin, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, err
	}
	cfg.Root = root
	st := store{root: root, autoCreate: cfg.AutoCreateVolumes}
	if err := st.init(); err != nil {
		return nil, err
	}
	if cfg.Mode.hasNode() {
		if err := st.registerNode(nodeRecord{NodeID: cfg.NodeID, MaxVolumes: cfg.MaxVolumes, Topology: cfg.Topology}); err != nil {
			return nil, fmt.Errorf("hostdir: register node: %w", err)
		}
	}
	audit, err := openAudit(cfg.AuditLog)
	if err != nil {
		return nil, err
	}
	p := &Plugin{
		cfg:     cfg,
		logger:  cfg.Logger,
		store:   st,
		mounter: &mounter{method: cfg.MountMethod, logger: cfg.Logger},
		faults:  newFaults(cfg),
		audit:   audit,
		stopped: make(chan struct{}),
	}
	p.exit = func() { go p.Stop() }
	p.srv = grpc.NewServer(
		grpc.UnaryInterceptor(p.intercept),
		// Stop must not return while a handler still runs (a delayed call,
		// say): that would leak its goroutine past the plugin's life.
		grpc.WaitForHandlers(true),
	)
	csipb.RegisterIdentityServer(p.srv, &identityServer{p: p})
	if cfg.Mode.hasController() {
		csipb.RegisterControllerServer(p.srv, &controllerServer{p: p})
	}
	if cfg.Mode.hasNode() {
		csipb.RegisterNodeServer(p.srv, &nodeServer{p: p})
	}
	return p, nil
}

// Serve answers CSI calls on lis until Stop. It returns nil after Stop.
func (p *Plugin) Serve(lis net.Listener) error {
	err := p.srv.Serve(lis)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Start listens on Config.Endpoint, replacing a stale socket file, and
// serves in the background until Stop.
func (p *Plugin) Start() error {
	path, err := socketPath(p.cfg.Endpoint)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	// A socket file left by a plugin that crashed makes listen fail with
	// EADDRINUSE; nothing can be listening on it if we are to own it.
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("hostdir: listen: %w", err)
	}
	p.mu.Lock()
	if p.serveDone != nil {
		p.mu.Unlock()
		lis.Close()
		return fmt.Errorf("hostdir: already started")
	}
	done := make(chan struct{})
	p.serveDone = done
	p.mu.Unlock()
	go func() {
		defer close(done)
		if err := p.Serve(lis); err != nil {
			p.logger.Error("serve failed", "error", err)
		}
	}()
	p.logger.Info("serving", "endpoint", p.cfg.Endpoint, "mode", p.cfg.Mode, "node", p.cfg.NodeID, "root", p.cfg.Root)
	return nil
}

// Stop stops serving, cancels calls in flight and waits for them, then
// closes the audit log. It is idempotent.
func (p *Plugin) Stop() {
	p.stopOnce.Do(func() {
		p.srv.Stop()
		p.mu.Lock()
		done := p.serveDone
		p.mu.Unlock()
		if done != nil {
			<-done
		}
		if err := p.audit.close(); err != nil {
			p.logger.Warn("closing audit log", "error", err)
		}
		close(p.stopped)
	})
	<-p.stopped
}

// Done is closed once the plugin has stopped, by Stop or by the control
// file's exit.
func (p *Plugin) Done() <-chan struct{} { return p.stopped }

// Endpoint is the configured endpoint.
func (p *Plugin) Endpoint() string { return p.cfg.Endpoint }

// VolumePath is where a volume's data lives, for tests and operators.
func (p *Plugin) VolumePath(volumeID string) string { return p.store.volumeDir(volumeID) }
