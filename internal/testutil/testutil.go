// Package testutil holds helpers shared by claimd's tests.
package testutil

import (
	"syscall"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/backoff"
	"github.com/claimd/claimd/internal/mountinfo"
)

// WaitFor polls check until it returns nil or the timeout passes, then
// fails the test with check's last error. Tests poll instead of sleeping:
// a fixed sleep is either too long or, on a busy machine, too short. The
// polls start 5 ms apart and slow down to 100 ms.
func WaitFor(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pace := backoff.New(5*time.Millisecond, 100*time.Millisecond)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %v", timeout, err)
		}
		time.Sleep(pace.Next())
	}
}

// TempDir is t.TempDir with a cleanup, registered after it and so run
// before its removal, that detaches every mount left under the directory.
// A test that fails halfway through a publish must not leave a bind mount
// behind: RemoveAll would then delete a volume's data through it and fail on
// the busy mount point.
func TempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() { UnmountUnder(t, dir) })
	return dir
}

// UnmountUnder lazily unmounts every mount point at or below dir, deepest
// first.
func UnmountUnder(t testing.TB, dir string) {
	t.Helper()
	points, err := mountinfo.Under(dir)
	if err != nil {
		return
	}
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			t.Logf("cleanup: unmount %s: %v", p, err)
		} else {
			t.Logf("cleanup: unmounted leftover mount %s", p)
		}
	}
}
