package httpapi

import (
	"net/http"

	"github.com/claimd/claimd/structs"
)

// admissionResult is the answer of POST /v1/plugin/{id}/admit and
// /revoke: which controller, whether it is now admitted, and the index.
type admissionResult struct {
	PluginID string `json:"plugin_id"`
	NodeID   string `json:"node_id"`
	Admitted bool   `json:"admitted"`
	Index    uint64 `json:"index"`
}

// POST /v1/plugin/{id}/admit?node=ID: `claimd plugin admit`.
func (s *Server) pluginAdmit(w http.ResponseWriter, r *http.Request) (any, error) {
	return s.pluginAdmission(w, r, "Plugin.AdmitController", true)
}

// POST /v1/plugin/{id}/revoke?node=ID: `claimd plugin revoke`.
func (s *Server) pluginRevoke(w http.ResponseWriter, r *http.Request) (any, error) {
	return s.pluginAdmission(w, r, "Plugin.RevokeController", false)
}

func (s *Server) pluginAdmission(w http.ResponseWriter, r *http.Request, method string, admitted bool) (any, error) {
	node := r.URL.Query().Get("node")
	if node == "" {
		return nil, structs.Invalid("node", "required: ?node=ID names the node whose controller it is")
	}
	var out structs.PluginAdmissionResponse
	if err := s.rpc(r, method, &structs.PluginAdmissionRequest{PluginID: r.PathValue("id"), NodeID: node}, &out); err != nil {
		return nil, err
	}
	setWriteIndex(w, out.Index)
	return admissionResult{PluginID: r.PathValue("id"), NodeID: node, Admitted: admitted, Index: out.Index}, nil
}
