package server

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/claimd/claimd/internal/testutil"
	"github.com/claimd/claimd/structs"
)

// The leader writes an entry that needs a feature
// only once every server in the Raft configuration, non-voters included,
// has reported it; a member never heard from counts as without it.
func TestAllServersSupport_EveryMemberMustHaveReportedTheFeature(t *testing.T) {
	s := mustNewLeader(t, AutopilotConfig{UpdateInterval: 100 * time.Millisecond})
	if !s.AllServersSupport(structs.FeatureHolderDetached) {
		t.Fatalf("lone leader of this build exp: supports got: not")
	}
	if s.AllServersSupport(1 << 40) {
		t.Fatalf("a feature this build lacks exp: not supported got: supported")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close()
	if err := s.raft.Raft.AddNonvoter(raft.ServerID("old"), raft.ServerAddress(gone), 0, 5*time.Second).Error(); err != nil {
		t.Fatalf("add non-voter: %v", err)
	}
	if s.AllServersSupport(structs.FeatureHolderDetached) {
		t.Fatalf("with a member never heard from exp: not supported got: supported")
	}
	if err := s.raft.Raft.RemoveServer(raft.ServerID("old"), 0, 5*time.Second).Error(); err != nil {
		t.Fatalf("remove non-voter: %v", err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if !s.AllServersSupport(structs.FeatureHolderDetached) {
			return errors.New("after the member left exp: supported got: not yet")
		}
		return nil
	})
}
