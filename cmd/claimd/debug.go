package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/hashicorp/go-hclog"
)

// serveDebug serves Go's pprof handlers on addr, which must be a loopback
// address: profiles show internals and a CPU profile costs the server
// time, so they are for an operator on the machine, never the network.
func serveDebug(addr string, logger hclog.Logger) (stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("%q is not a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: mux}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("debug server", "error", err)
		}
	}()
	logger.Info("serving pprof", "addr", ln.Addr().String())
	return func() { hs.Close() }, nil
}
