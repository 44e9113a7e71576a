package netlab

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/claimd/claimd/rpc"
)

// inNamespace runs fn on an OS thread switched into the network namespace
// at nsPath, so that sockets fn creates belong to that namespace. A socket
// keeps its namespace for life; only its creation has to happen there.
//
// fn runs on a fresh goroutine locked to its thread. If switching the thread
// back fails, the goroutine exits still locked, and the Go runtime then
// destroys the thread instead of handing a thread in the wrong namespace to
// other goroutines. (Threads the runtime starts while this one is locked are
// cloned from its template thread, not from this one, so they do not
// inherit the namespace either.)
func inNamespace[T any](nsPath string, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var zero T
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{zero, fmt.Errorf("netlab: open own namespace: %w", err)}
			return
		}
		defer self.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{zero, fmt.Errorf("netlab: open namespace: %w", err)}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{zero, fmt.Errorf("netlab: enter namespace %s: %w", nsPath, err)}
			return
		}
		v, err := fn()
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) != nil {
			// Stay locked: see above. What fn made is still good.
			ch <- result{v, err}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}

func (l *Lab) nsPath(host string) string {
	return filepath.Join(netnsDir, l.host(host).ns)
}

// Dialer returns an rpc.Dialer whose TCP connections start inside host's
// namespace, so that the test process (in the root namespace) can act as a
// client on that host: its packets leave through host's veth and are subject
// to host's faults. The address is an IP:port (no name resolution happens
// inside the namespace). It panics on an unknown host.
func (l *Lab) Dialer(host string) rpc.Dialer {
	path := l.nsPath(host)
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return inNamespace(path, func() (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		})
	}
}

// Listen opens a TCP listener inside host's namespace; addr is as for
// net.Listen, e.g. lab.Addr(host)+":0". Connections it accepts are in that
// namespace too, whichever goroutine accepts them.
func (l *Lab) Listen(host, addr string) (net.Listener, error) {
	if _, ok := l.hosts[host]; !ok {
		return nil, fmt.Errorf("netlab: unknown host %q", host)
	}
	return inNamespace(l.nsPath(host), func() (net.Listener, error) {
		return net.Listen("tcp", addr)
	})
}

// listenPacket opens a UDP socket inside host's namespace (for probes).
func (l *Lab) listenPacket(host, addr string) (net.PacketConn, error) {
	return inNamespace(l.nsPath(host), func() (net.PacketConn, error) {
		return net.ListenPacket("udp", addr)
	})
}
