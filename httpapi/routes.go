package httpapi

import (
	"fmt"
	"net/http"

	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/ui"
)

// routes registers every route. docs/http-api.md documents each one; keep
// the two in step.
func (s *Server) routes() {
	read := func(extra ...string) []string { return append(append([]string{}, readParams...), extra...) }
	handle := func(pattern string, params []string, fn endpoint) {
		s.mux.Handle(pattern, s.wrap(params, fn))
		s.patterns = append(s.patterns, pattern)
	}
	// Writes that create or replace take PUT or POST alike.
	write := func(path string, params []string, fn endpoint) {
		handle("PUT "+path, params, fn)
		handle("POST "+path, params, fn)
	}

	handle("GET /v1/volumes", read("plugin"), s.volumeList)
	write("/v1/volumes", nil, s.volumesRegister)
	handle("GET /v1/volume/{id}", read(), s.volumeGet)
	write("/v1/volume/{id}", nil, s.volumeRegister)
	handle("DELETE /v1/volume/{id}", []string{"force"}, s.volumeDeregister)
	handle("POST /v1/volume/{id}/detach", []string{"node", "force"}, s.volumeDetach)
	write("/v1/volume/{id}/create", nil, s.volumeCreate)
	handle("DELETE /v1/volume/{id}/delete", nil, s.volumeDelete)
	write("/v1/volume/{id}/snapshot", nil, s.snapshotCreate)
	handle("GET /v1/snapshots", []string{"plugin"}, s.snapshotList)
	handle("DELETE /v1/snapshot", []string{"plugin", "id"}, s.snapshotDelete)
	write("/v1/volume/{id}/expand", nil, s.volumeExpand)
	write("/v1/volume/{id}/modify", nil, s.volumeModify)
	handle("POST /v1/volumes/reconcile", []string{"volume"}, s.volumesReconcile)
	handle("GET /v1/storage/reports", read("plugin"), s.storageReports)
	handle("GET /v1/volume/{id}/storage", nil, s.volumeStorage)
	handle("GET /v1/volume/{id}/usage", nil, s.volumeUsage)

	handle("GET /v1/allocs", read("node"), s.allocList)
	write("/v1/allocs", nil, s.allocPlace)
	handle("GET /v1/alloc/{id}", read(), s.allocGet)
	handle("POST /v1/alloc/{id}/stop", nil, s.allocStop)

	handle("GET /v1/nodes", read(), s.nodeList)
	handle("GET /v1/node/{id}", read(), s.nodeGet)
	handle("POST /v1/node/{id}/drain", []string{"dry-run"}, s.nodeDrain)
	handle("GET /v1/node/{id}/drain", read(), s.nodeDrainStatus)
	handle("POST /v1/node/{id}/eligibility", []string{"eligible"}, s.nodeEligibility)
	handle("POST /v1/node/{id}/deregister", nil, s.nodeDeregister)
	handle("POST /v1/node/{id}/purge", nil, s.nodePurge)
	handle("GET /v1/plugins", read(), s.pluginList)
	handle("GET /v1/plugin/{id}", read(), s.pluginGet)
	handle("POST /v1/plugin/{id}/admit", []string{"node"}, s.pluginAdmit)
	handle("POST /v1/plugin/{id}/revoke", []string{"node"}, s.pluginRevoke)
	handle("GET /v1/evals", read("status", "volume"), s.evalList)
	handle("GET /v1/eval/{id}", read(), s.evalGet)

	handle("GET /v1/status/leader", nil, s.statusLeader)
	handle("GET /v1/status/peers", nil, s.statusPeers)
	handle("GET /v1/operator/raft/configuration", []string{"stale"}, s.raftConfiguration)
	handle("GET /v1/operator/raft/health", nil, s.raftHealth)
	handle("DELETE /v1/operator/raft/peer", []string{"id", "address"}, s.raftRemovePeer)
	write("/v1/operator/raft/transfer-leader", []string{"id"}, s.raftTransferLeader)
	write("/v1/system/gc", nil, s.systemGC)
	handle("GET /v1/system/release-status", nil, s.releaseStatus)
	// Routes that answer in their own format (Prometheus text, an archive).
	for pattern, h := range map[string]http.HandlerFunc{
		"GET /v1/metrics":                    s.metrics,
		"GET /v1/operator/snapshot":          s.snapshotSave,
		"PUT /v1/operator/snapshot":          s.snapshotRestore,
		"POST /v1/operator/snapshot":         s.snapshotRestore,
		"POST /v1/operator/snapshot/inspect": s.snapshotInspect,
	} {
		s.mux.HandleFunc(pattern, h)
		s.patterns = append(s.patterns, pattern)
	}

	write("/v1/acl/bootstrap", nil, s.aclBootstrap)
	handle("GET /v1/acl/policies", read(), s.aclPolicyList)
	handle("GET /v1/acl/policy/{name}", read(), s.aclPolicyGet)
	write("/v1/acl/policy/{name}", nil, s.aclPolicyApply)
	handle("DELETE /v1/acl/policy/{name}", nil, s.aclPolicyDelete)
	handle("GET /v1/acl/tokens", read(), s.aclTokenList)
	write("/v1/acl/token", nil, s.aclTokenCreate)
	handle("GET /v1/acl/token/self", nil, s.aclTokenSelf)
	handle("GET /v1/acl/token/{accessor}", read(), s.aclTokenGet)
	handle("DELETE /v1/acl/token/{accessor}", nil, s.aclTokenDelete)

	handle("GET /v1/agent/health", nil, s.agentHealth)
	handle("GET /v1/agent/self", nil, s.agentSelf)

	// The web UI: static files that call the routes above from the
	// browser, with the user's token (package ui).
	s.mux.Handle("GET "+ui.Prefix, ui.Handler())
	s.mux.Handle("GET /{$}", http.RedirectHandler(ui.Prefix, http.StatusFound))
	s.patterns = append(s.patterns, "GET "+ui.Prefix, "GET /")
}

// rpcMethods are the only RPC methods the routes call. Each is authorized
// by the caller's token alone, never by the agent's certificate that
// carries the call (see the package doc); a test checks the list against
// the servers' access table.
var rpcMethods = map[string]bool{
	"Volume.List": true, "Volume.Get": true, "Volume.Register": true, "Volume.Deregister": true, "Volume.Detach": true,
	"Volume.Create": true, "Volume.Delete": true,
	"Volume.SnapshotCreate": true, "Volume.SnapshotDelete": true, "Volume.SnapshotList": true, "Volume.Expand": true,
	"Alloc.List": true, "Alloc.Get": true, "Alloc.Place": true, "Alloc.Stop": true,
	"Node.List": true, "Node.Get": true, "Plugin.List": true, "Plugin.Get": true,
	"Plugin.AdmitController": true, "Plugin.RevokeController": true,
	"Node.Drain": true, "Node.DrainStatus": true, "Node.UpdateEligibility": true, "Node.Purge": true, "Node.Deregister": true,
	"Volume.Modify": true, "Volume.Reconcile": true, "Volume.Usage": true, "Volume.StorageReports": true, "Volume.Storage": true,
	"Eval.List": true, "Eval.Get": true,
	"Status.Leader": true, "Status.Peers": true, "Status.Runtime": true,
	"Operator.RaftGetConfiguration": true, "Operator.RaftHealth": true, "Operator.RaftRemovePeer": true, "Operator.TransferLeadership": true,
	"System.GarbageCollect": true, "System.ReleaseStatus": true,
	"ACL.Bootstrap": true, "ACL.PolicyUpsert": true, "ACL.PolicyDelete": true, "ACL.PolicyGet": true,
	"ACL.PolicyList": true, "ACL.TokenCreate": true, "ACL.TokenDelete": true, "ACL.TokenGet": true,
	"ACL.TokenList": true, "ACL.TokenSelf": true,
}

// rpc calls a server with the HTTP caller's token, unchanged (none: the
// servers treat the call as anonymous). Forwarding, stale reads, blocking
// and the ACL check happen there, as for the CLI.
func (s *Server) rpc(r *http.Request, method string, args structs.Authenticated, reply any) error {
	if !rpcMethods[method] {
		return fmt.Errorf("httpapi: %s is not in rpcMethods", method)
	}
	token, err := requestToken(r)
	if err != nil {
		return err
	}
	args.SetToken(token)
	return s.api.Call(r.Context(), method, args, reply)
}
