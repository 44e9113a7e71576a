package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// requiredEnv, when set, turns the skip of a test that needs root (here,
// to mount a tmpfs) into a failure, as integration/netlab does: CI runs as
// root and must not pass by skipping.
const requiredEnv = "CLAIMD_NETLAB_REQUIRED"

// SmallDisk mounts a tmpfs of size bytes on a new directory and returns
// it, unmounted again when the test ends. A test of what a full disk does
// fills it with FillDisk. Without root the test is skipped, or fails if
// CLAIMD_NETLAB_REQUIRED is set.
func SmallDisk(t testing.TB, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)+",mode=0700")
	if err != nil {
		msg := fmt.Sprintf("mount a %d-byte tmpfs (needs root): %v", size, err)
		if os.Getenv(requiredEnv) != "" {
			t.Fatalf("%s (%s is set)", msg, requiredEnv)
		}
		t.Skip(msg)
	}
	// Registered after t.TempDir's removal, so run before it.
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Logf("cleanup: unmount %s: %v", dir, err)
		}
	})
	return dir
}

// FreeBytes is the space left for an unprivileged writer in dir's file
// system.
func FreeBytes(t testing.TB, dir string) uint64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Bavail * uint64(st.Bsize)
}

// FillDisk writes a filler file in dir until at most leave bytes are free
// in its file system, and returns the function that removes it again.
func FillDisk(t testing.TB, dir string, leave uint64) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{0xdf}, 1<<20)
	for {
		have := FreeBytes(t, dir)
		if have <= leave {
			break
		}
		n := uint64(len(chunk))
		if have-leave < n {
			n = have - leave
		}
		if _, err := f.Write(chunk[:n]); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatalf("fill %s: %v", dir, err)
		}
	}
	return func() {
		t.Helper()
		if err := os.Remove(path); err != nil {
			t.Fatalf("free %s: %v", dir, err)
		}
	}
}
