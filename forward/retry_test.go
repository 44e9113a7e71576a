package forward

import (
	"errors"
	"net"
	netrpc "net/rpc"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"

	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
)

// Volume is a leader whose first call of each method is applied and then
// lost: the handler counts it and closes every session before answering,
// as a leader stopped (or killed) right after applying would. Registered
// under the real service name, so the real allowlist decides.
type Volume struct {
	mu       sync.Mutex
	sessions []*yamux.Session
	register atomic.Int64
	claim    atomic.Int64
}

func (v *Volume) Register(args *structs.VolumeRegisterRequest, reply *string) error {
	if v.register.Add(1) == 1 {
		v.dropSessions()
	}
	*reply = "registered:" + args.Volumes[0].ID
	return nil
}

func (v *Volume) Claim(args *WriteArgs, reply *string) error {
	if v.claim.Add(1) == 1 {
		v.dropSessions()
	}
	*reply = "claimed:" + args.Value
	return nil
}

func (v *Volume) dropSessions() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, s := range v.sessions {
		s.Close()
	}
}

func mustServeLossyLeader(t *testing.T) (string, *Volume) {
	t.Helper()
	svc := &Volume{}
	rs := netrpc.NewServer()
	if err := rs.Register(svc); err != nil {
		t.Fatal(err)
	}
	addr := testutil.ServeLoopback(t, func(c net.Conn) {
		if _, ok := testutil.ReadProtocolByte(c); !ok {
			return
		}
		testutil.ServeMuxStreams(c, rpc.YamuxConfig(hclog.NewNullLogger()), func(sess *yamux.Session) {
			svc.mu.Lock()
			svc.sessions = append(svc.sessions, sess)
			svc.mu.Unlock()
		}, func(s net.Conn) {
			rs.ServeCodec(rpc.NewServerCodec(s, rpc.MaxRequestBytes))
		})
	})
	return addr, svc
}

func TestForward_IdempotentWriteLostAfterApplyIsSentAgain(t *testing.T) {
	addr, svc := mustServeLossyLeader(t)
	ls := newFakeLeader()
	ls.set(addr, false)
	f := newTestForwarder(t, ls, 10*time.Second)
	args := &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{ID: "v"}}}
	var reply string
	done, err := f.Forward("Volume.Register", args, args, &reply)
	if !done || err != nil || reply != "registered:v" {
		t.Fatalf("register whose reply was lost exp: sent again and answered got: done=%v %q %v", done, reply, err)
	}
	if n := svc.register.Load(); n != 2 {
		t.Fatalf("register applies exp: 2 (the lost one, then the retry) got: %d", n)
	}
}

func TestForward_NonIdempotentWriteLostAfterApplyIsNotSentAgain(t *testing.T) {
	addr, svc := mustServeLossyLeader(t)
	ls := newFakeLeader()
	ls.set(addr, false)
	f := newTestForwarder(t, ls, 10*time.Second)
	args := &WriteArgs{Value: "v"}
	var reply string
	done, err := f.Forward("Volume.Claim", args, args, &reply)
	if !done || !errors.Is(err, structs.ErrUnavailable) || errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("claim whose reply was lost exp: unavailable (outcome unknown) got: done=%v %q %v", done, reply, err)
	}
	if n := svc.claim.Load(); n != 1 {
		t.Fatalf("claim applies exp: 1 (never sent again) got: %d", n)
	}
}

func TestRetryable_OnlyIdempotentWritesOnUnknownOutcome(t *testing.T) {
	unknown := structs.NewError(structs.CodeUnavailable, "leadership lost while committing; the outcome is unknown")
	register := &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{ID: "a"}, {ID: "b"}}}
	grows := &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{ID: "a"}, {ID: "b", Capacity: 1 << 30}}}
	status := &structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusReady}
	claim := &structs.VolumeClaimRequest{VolumeID: "a", AllocID: "x", NodeID: "n1"}
	for _, c := range []struct {
		method string
		args   any
		err    error
		want   bool
	}{
		{"Volume.Claim", claim, structs.ErrNoLeader, true},
		{"Volume.Claim", claim, unknown, false},
		{"Volume.Claim", claim, structs.ErrShutdown, false},
		{"Volume.Deregister", &structs.VolumeDeregisterRequest{VolumeIDs: []string{"a"}}, unknown, false},
		{"Volume.Register", register, unknown, true},
		{"Volume.Register", register, structs.ErrShutdown, true},
		{"Volume.Register", grows, unknown, false},
		{"Volume.Register", grows, structs.ErrNoLeader, true},
		{"Node.UpdateStatus", status, unknown, true},
		{"Volume.Register", register, structs.NotFound("volume", "x"), false},
		{"Volume.Register", register, structs.Invalid("volumes", "bad"), false},
	} {
		if got := retryable(c.method, c.args, c.err); got != c.want {
			t.Errorf("retryable(%s, %+v, %v) exp: %v got: %v", c.method, c.args, c.err, c.want, got)
		}
	}
}
