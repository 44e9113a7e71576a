// Package endpoints holds the server's RPC handlers. Every handler begins
// with forward-or-serve:
//
//	if done, err := e.srv.Forward("Volume.Register", args, args, reply); done {
//		return err
//	}
//
// so that one mechanism decides, for every call, whether this server answers
// or the leader does. Writes then go through Server.Apply (one Raft entry);
// reads go through blockingQuery so that any read can wait for a change.
package endpoints
