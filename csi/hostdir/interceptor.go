package hostdir

import (
	"context"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/claimd/claimd/internal/backoff"
)

// intercept wraps every call: fault injection first (exit, delay, armed
// failure), then the handler, then one audit line with the outcome.
func (p *Plugin) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := methodOf(info.FullMethod)
	act := p.faults.next(method)

	if act.exit {
		err := status.Error(codes.Unavailable, "hostdir: exiting as the control file asks")
		p.record(method, req, nil, err)
		p.logger.Warn("exiting as the control file asks", "method", method)
		p.exit()
		return nil, err
	}

	var resp any
	err := wait(ctx, act.delay)
	if err == nil {
		err = act.fail
	}
	if err == nil {
		resp, err = handler(ctx, req)
		// The audit line is written once the work is done, before the
		// answer is held back, so a test sees the call happened.
		p.record(method, req, resp, err)
		if err == nil {
			if err = wait(ctx, act.delayAfter); err != nil {
				resp = nil
			}
		}
		return resp, err
	}
	p.record(method, req, resp, err)
	return resp, err
}

// wait sleeps for d (no time: no wait) unless the call's context ends
// first, which is the call's error then.
func wait(ctx context.Context, d time.Duration) error {
	if err := backoff.Sleep(ctx, d); err != nil {
		return status.FromContextError(err).Err()
	}
	return nil
}

// record writes the audit line for one call. IDs the plugin made (a new
// volume's or snapshot's) come from resp, which is nil on failure.
func (p *Plugin) record(method string, req, resp any, err error) {
	e := AuditEntry{Time: time.Now().UTC(), Method: method, Result: "ok"}
	if r, ok := req.(interface{ GetVolumeId() string }); ok {
		e.Volume = r.GetVolumeId()
	}
	if r, ok := req.(interface{ GetSnapshotId() string }); ok {
		e.Snapshot = r.GetSnapshotId()
	}
	switch r := req.(type) {
	case *csipb.CreateVolumeRequest:
		e.Snapshot = r.GetVolumeContentSource().GetSnapshot().GetSnapshotId()
		if v, ok := resp.(*csipb.CreateVolumeResponse); ok {
			e.Volume = v.GetVolume().GetVolumeId()
		}
	case *csipb.CreateSnapshotRequest:
		e.Volume = r.GetSourceVolumeId()
		if v, ok := resp.(*csipb.CreateSnapshotResponse); ok {
			e.Snapshot = v.GetSnapshot().GetSnapshotId()
		}
	}
	if r, ok := req.(interface{ GetNodeId() string }); ok {
		e.Node = r.GetNodeId()
	} else if strings.HasPrefix(method, "Node") {
		e.Node = p.cfg.NodeID
	}
	if r, ok := req.(interface{ GetTargetPath() string }); ok {
		e.Target = r.GetTargetPath()
	} else if r, ok := req.(interface{ GetStagingTargetPath() string }); ok {
		e.Target = r.GetStagingTargetPath()
	}
	if err != nil {
		e.Result = err.Error()
	}
	if werr := p.audit.write(e); werr != nil {
		p.logger.Warn("audit log write failed", "error", werr)
	}
}
