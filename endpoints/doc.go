// Package endpoints holds the server's RPC handlers. Every handler that may
// be forwarded begins with authorize-then-forward:
//
//	c, done, err := v.auth.gate("Volume.Register", args, reply, nil)
//	if done {
//		return err
//	}
//
// gate decides the call on the server it entered (the access rule in
// authz.go against the connection's certificate role and the token),
// stamps the caller's identity on the request, and only then forwards it
// to the leader, which checks the same identity again (decision 37). So one
// mechanism decides, for every call, who may make it and whether this
// server answers or the leader does. Writes then go through Server.Apply
// (one Raft entry); reads go through blockingQuery so that any read can
// wait for a change, and check their caller again before answering.
package endpoints
