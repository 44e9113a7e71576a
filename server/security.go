package server

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/claimd/claimd/endpoints"
	"github.com/claimd/claimd/structs"
)

// ACLEnabled implements endpoints.Cluster.
func (s *Server) ACLEnabled() bool { return s.cfg.ACLEnabled }

// Security is this server's refusal counters (tests read them directly).
func (s *Server) Security() *endpoints.SecurityCounters { return &s.security }

// aclResetFile is where an operator writes the reset index to allow one
// more ACL bootstrap (docs/security.md).
const aclResetFile = "acl-bootstrap-reset"

// ACLResetIndex implements endpoints.Cluster.
func (s *Server) ACLResetIndex() uint64 {
	b, err := os.ReadFile(filepath.Join(s.cfg.DataDir, aclResetFile))
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.logger.Warn("cannot read ACL bootstrap reset file", "error", err)
		}
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		s.logger.Warn("ACL bootstrap reset file does not hold an index", "file", aclResetFile)
		return 0
	}
	return n
}

// serverToken is the cluster's server token ("" before a leader made one,
// or with ACLs off). Servers present it on server-to-server calls that act
// for the cluster itself (node calls one hop away, leaving), which is how
// leader-driven work never needs a user token, whichever server leads.
func (s *Server) serverToken() string {
	if !s.cfg.ACLEnabled {
		return ""
	}
	return s.tokens.ServerSecret(s.fsm.State())
}

// BarrierPending implements endpoints.Reader.
func (s *Server) BarrierPending() bool {
	if _, self := s.Leader(); !self {
		return false
	}
	s.readsMu.Lock()
	ready := s.readsReady
	s.readsMu.Unlock()
	select {
	case <-ready:
		return false
	default:
		return true
	}
}

// ensureServerToken creates the server token once per cluster (the entry
// is a no-op when one exists, so two leaders racing make one token). It
// retries until it succeeds, leadership is lost, or the server stops.
func (s *Server) ensureServerToken(stopCh <-chan struct{}) {
	if !s.cfg.ACLEnabled {
		return
	}
	for s.fsm.State().ServerToken() == nil {
		tok := &structs.ACLToken{
			AccessorID: structs.NewSecret(), SecretID: structs.NewSecret(),
			Name: "claimd servers", Type: structs.ACLTokenServer, CreateTime: time.Now().UTC(),
		}
		_, _, err := s.Apply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{
			Tokens: []*structs.ACLToken{tok}, IfAbsentType: structs.ACLTokenServer})
		if err == nil {
			s.logger.Info("created the server token", "accessor_id", tok.AccessorID)
			continue
		}
		s.logger.Warn("creating the server token failed; retrying", "error", err)
		select {
		case <-stopCh:
			return
		case <-s.shutdownCh:
			return
		case <-time.After(time.Second):
		}
	}
}
