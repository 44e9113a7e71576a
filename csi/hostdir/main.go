package hostdir

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// Main runs the plugin as a process: `claimd csi-plugin hostdir` hands it
// its arguments (flags only, without the command words). It serves until
// SIGINT or SIGTERM and returns the exit status. A control file asking to
// exit ends the process at once with ExitCodeControl, the way a crashing
// plugin would, without unwinding.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hostdir", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fail, delay, topology := methodCounts{}, methodDelays{}, segments{}
	var (
		endpoint    = fs.String("endpoint", "", "listen on unix://PATH (required)")
		root        = fs.String("root", "", "directory holding the volumes (required)")
		nodeID      = fs.String("node-id", "", "node ID NodeGetInfo reports (default: host name)")
		mode        = fs.String("mode", string(ModeMonolith), "services to serve: node, controller or monolith")
		mountMethod = fs.String("mount", string(MountAuto), "how to present volumes: auto, bind or symlink")
		maxVolumes  = fs.Int64("max-volumes", 0, "max volumes per node reported by NodeGetInfo and enforced by ControllerPublish (0: no limit)")
		capacity    = fs.Int64("capacity", 0, "bytes GetCapacity reports and CreateVolume allocates from (0: the root's free space)")
		auditLog    = fs.String("audit-log", "", "append one JSON line per call to `FILE`")
		controlFile = fs.String("control-file", "", "read fault injection from `FILE` on every call")
		logLevel    = fs.String("log-level", "info", "log level")
		autoCreate  = fs.Bool("auto-create", false, "create a volume's directory on first use (claimd never calls CreateVolume)")
	)
	fs.Var(fail, "fail", "fail the next N calls of METHOD with Unavailable: `METHOD:N` (repeatable)")
	fs.Var(topology, "topology", "a topology segment of this node, or of the volumes a controller creates: `KEY=VALUE` (repeatable)")
	fs.Var(delay, "delay", "delay every call of METHOD: `METHOD:DURATION` (repeatable)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hostdir: unexpected arguments %v\n", fs.Args())
		return 2
	}
	if *endpoint == "" || *root == "" {
		fmt.Fprintln(stderr, "hostdir: -endpoint and -root are required")
		return 2
	}
	if *nodeID == "" && Mode(*mode).hasNode() {
		h, err := os.Hostname()
		if err != nil {
			fmt.Fprintf(stderr, "hostdir: -node-id not given and no host name: %v\n", err)
			return 2
		}
		*nodeID = h
	}

	logger := hclog.New(&hclog.LoggerOptions{
		Name:   "csi.hostdir",
		Level:  hclog.LevelFromString(*logLevel),
		Output: stderr,
	})
	p, err := New(Config{
		Endpoint:          *endpoint,
		Root:              *root,
		NodeID:            *nodeID,
		Mode:              Mode(*mode),
		MountMethod:       MountMethod(*mountMethod),
		MaxVolumes:        *maxVolumes,
		Topology:          topology,
		Capacity:          *capacity,
		AuditLog:          *auditLog,
		AutoCreateVolumes: *autoCreate,
		ControlFile:       *controlFile,
		Fail:              fail,
		Delay:             delay,
		Logger:            logger,
	})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	p.exit = func() { os.Exit(ExitCodeControl) }
	if err := p.Start(); err != nil {
		fmt.Fprintln(stderr, err)
		p.Stop()
		return 1
	}
	fmt.Fprintf(stdout, "hostdir: serving %s on %s\n", *mode, *endpoint)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
		logger.Info("signal received, stopping")
	case <-p.Done():
	}
	p.Stop()
	return 0
}
