package rpc

import (
	"net"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
)

func newTestYamuxServer(c net.Conn) (*yamux.Session, error) {
	return yamux.Server(c, YamuxConfig(hclog.NewNullLogger()))
}
