package endpoints

import (
	"github.com/claimd/claimd/structs"
)

// AdmitController admits the controller of a plugin on one node to
// controller calls (issue 38). A node's fingerprint says what it runs; only
// an operator with plugin:write (or the automatic cases of autoAdmitSource)
// decides that the servers send it volume secrets and believe its answers.
func (p *Plugin) AdmitController(args *structs.PluginAdmissionRequest, reply *structs.PluginAdmissionResponse) error {
	return p.admission("Plugin.AdmitController", structs.PluginAdmitControllerRequestType, args, reply)
}

// RevokeController takes an admission back: the controller receives no
// more calls (one under way finishes).
func (p *Plugin) RevokeController(args *structs.PluginAdmissionRequest, reply *structs.PluginAdmissionResponse) error {
	return p.admission("Plugin.RevokeController", structs.PluginRevokeControllerRequestType, args, reply)
}

func (p *Plugin) admission(method string, mt structs.MessageType, args *structs.PluginAdmissionRequest, reply *structs.PluginAdmissionResponse) error {
	_, done, err := p.auth.gate(method, args, reply, nil)
	if done {
		return err
	}
	if err := args.Validate(); err != nil {
		return err
	}
	_, index, err := p.srv.Apply(mt, args)
	reply.Index = index
	return err
}

// autoAdmitSource says whether a node registration admits the node's
// controllers without an operator, and why: only where nobody declares
// themselves a controller. With ACLs off there is no authorization model
// at all (anyone who reaches the port may do anything), so every
// controller is admitted; a registration that entered over a server
// certificate comes from an agent run with -server and -client (as -dev
// is), which holds the cluster's own identity. A client certificate, a
// cli certificate with a node:write token or a plaintext connection with
// one: pending. It reads the entry identity the authorization decided on
// (c.id, the connection or a forwarding server's CallOrigin believed only
// over a server certificate), never a field of the request, and the
// answer travels in the log entry, so every server applies the same.
func autoAdmitSource(srv *Deps, c *caller) string {
	switch {
	case !srv.ACLEnabled():
		return structs.AdmittedByACLDisabled
	case c != nil && c.id.serverCert():
		return structs.AdmittedByServerCert
	}
	return ""
}
