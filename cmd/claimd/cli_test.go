package main

import (
	"errors"
	"testing"

	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
)

// The TLS hint goes with every way a server's immediate close shows up on
// a plaintext client, and not with a refused connection (nothing there).
func TestCutOffPlaintext(t *testing.T) {
	transport := func(msg string) error {
		return errors.Join(structs.NewError(structs.CodeUnavailable, msg), rpc.ErrTransport)
	}
	for msg, want := range map[string]bool{
		"Volume.List: unexpected EOF": true,
		"Volume.List: write tcp 127.0.0.1:1->127.0.0.1:2: write: connection reset by peer": true,
		"request not sent: open stream: session shutdown":                                  true,
		"Volume.List: write: broken pipe":                                                  true,
		"dial 127.0.0.1:1: connect: connection refused":                                    false,
	} {
		if got := cutOffPlaintext(transport(msg)); got != want {
			t.Errorf("cutOffPlaintext(%q) exp: %t got: %t", msg, want, got)
		}
	}
}
