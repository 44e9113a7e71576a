package integration

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
)

func TestWriteThroughFollower_RidesThroughLeaderElection(t *testing.T) {
	c := harness.NewCluster(t, 3, harness.Options{})
	c.StartAll()
	old := c.WaitForLeader(electionWait)
	f := c.Followers()[0]
	cl := f.Client()
	if err := cl.Ping(harness.Ctx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	old.Stop()
	// Sent while there is no leader: the follower holds it and forwards
	// once a new leader is elected (L3 in docs/architecture.md).
	if _, err := cl.RegisterVolumes(harness.Ctx(t, 30*time.Second), testVolume("during-election")); err != nil {
		t.Fatalf("write during election exp: held then committed got: %v", err)
	}
	c.WaitForLeader(electionWait)
	waitSameVolumes(t, c, []string{"during-election"})
}

func TestServer_MalformedAndUnknownFramesChangeNothing(t *testing.T) {
	c := harness.NewCluster(t, 1, harness.Options{})
	c.StartAll()
	s := c.WaitForLeader(electionWait)
	mustRegister(t, s, "v1")
	before := s.Server().Raft().LastIndex()

	for name, frame := range map[string][]byte{
		"unknown protocol byte": {0x7f, 1, 2, 3},
		"garbage rpc frame":     {byte(rpc.ProtoRPC), 0xc1, 0xc1, 0xc1},
		"oversized rpc frame":   append([]byte{byte(rpc.ProtoRPC), 0xdb, 0x7f, 0xff, 0xff, 0xff}, []byte(strings.Repeat("x", 1<<16))...),
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", s.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, _ = conn.Write(frame)
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = io.ReadAll(conn)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("exp: server closes the connection got: it stayed open")
			}
		})
	}
	if after := s.Server().Raft().LastIndex(); after != before {
		t.Fatalf("raft last index exp: %d got: %d", before, after)
	}
	// The server still serves.
	if got := localVolumeIDs(t, s); len(got) != 1 || got[0] != "v1" {
		t.Fatalf("volumes exp: [v1] got: %v", got)
	}
	if _, err := s.Client().DeregisterVolumes(harness.Ctx(t, 10*time.Second), false, "nope"); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("deregister unknown exp: not_found got: %v", err)
	}
}
