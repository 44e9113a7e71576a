package client

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// A plugin restarted makes a new socket file at the same path: the agent
// must see it as changed, even when the old file was left behind (kill
// -9) and removed by the new plugin just before it listened.
func TestSocketSeen_ARestartedPluginsSocketIsNew(t *testing.T) {
	dir, err := os.MkdirTemp("", "sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "csi.sock")
	listen := func() {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(false) // left behind, as by a killed plugin
		l.Close()
	}
	absent := lookAtSocket(path)
	if absent.fi != nil || !absent.same(lookAtSocket(path)) {
		t.Fatal("no socket exp: seen as absent, twice the same got: different")
	}
	listen()
	first := lookAtSocket(path)
	if first.fi == nil || first.same(absent) {
		t.Fatal("socket created exp: changed from absent got: same")
	}
	if !first.same(lookAtSocket(path)) {
		t.Fatal("the same socket looked at again exp: same got: changed")
	}
	for i := 0; i < 20; i++ { // an inode number may be reused at once
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		listen()
		next := lookAtSocket(path)
		if next.same(first) {
			t.Fatalf("socket replaced (round %d) exp: changed got: same", i)
		}
		first = next
	}
}
