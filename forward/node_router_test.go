package forward

import (
	"context"
	"net"
	netrpc "net/rpc"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/structs"
)

// Status answers HasNodeConn as a server holding the node's session.
type Status struct{}

func (Status) HasNodeConn(args *structs.NodeConnRequest, reply *structs.NodeConnResponse) error {
	*reply = structs.NodeConnResponse{Connected: true, Established: 1}
	return nil
}

// A server that is stopped (it takes the connection and never answers)
// must not hold up finding the node's session on another: a storage call's
// whole budget is a few seconds (decision 46), and the peer timeout is 5 s.
func TestNodeRouter_FindsTheSessionWithoutWaitingOutAStoppedServer(t *testing.T) {
	rs := netrpc.NewServer()
	if err := rs.RegisterName("Status", Status{}); err != nil {
		t.Fatal(err)
	}
	holder := serveRPC(t, rs)
	stopped := testutil.ServeLoopback(t, func(c net.Conn) {
		// Accepted by the kernel, answered by nobody, as a SIGSTOPped
		// process's socket is.
		buf := make([]byte, 1)
		_, _ = c.Read(buf)
		time.Sleep(10 * time.Second)
	})
	pool := NewPool(nil, nil)
	t.Cleanup(pool.Shutdown)
	r := NewNodeRouter(NewNodeConns(), pool, func() []string { return []string{stopped, holder} }, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	start := time.Now()
	addr, err := r.findServer(ctx, "n1")
	if err != nil || addr != holder {
		t.Fatalf("exp: the holder %s got: %q %v", holder, addr, err)
	}
	// The holder answers at once; waiting for the stopped one would take
	// the whole 4 s.
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("exp: found once the holder answered (plus %s) got: after %s", sessionGrace, took)
	}
}
