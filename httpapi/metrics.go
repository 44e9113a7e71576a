package httpapi

import (
	"net/http"

	"github.com/claimd/claimd/structs"
)

// metrics serves GET /v1/metrics (JSON) and ?format=prometheus through the
// telemetry handler the agent gave (Config.Metrics). Metrics describe the
// whole cluster's workload, so reading them needs what reading a server's
// runtime needs: the caller's token is checked by calling Status.Runtime
// with it (operator:read), the RPC layer's rule, not a second one here.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	if err := checkParams(r, []string{"format"}); err != nil {
		s.writeError(w, r, err)
		return
	}
	if s.cfg.Metrics == nil {
		s.writeError(w, r, structs.NewError(structs.CodeNotFound, "metrics are not collected by this agent"))
		return
	}
	var stats structs.RuntimeStats
	if err := s.rpc(r, "Status.Runtime", &structs.EmptyArgs{}, &stats); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.cfg.Metrics.ServeHTTP(w, r)
}
