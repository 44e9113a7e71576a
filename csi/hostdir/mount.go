package hostdir

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// stageLink is the symlink a symlink-mode stage puts inside the staging
// directory. The directory itself belongs to the CO (the CSI spec has it
// create the directory), so the plugin adds an entry instead of replacing
// it, and unstaging leaves the directory empty for the CO to remove.
const stageLink = ".hostdir-staged"

// mounter presents volume directories at staging and target paths.
type mounter struct {
	method MountMethod
	logger hclog.Logger
}

// tryBind says whether to attempt a bind mount at all: mount(2) needs
// CAP_SYS_ADMIN, and trying without it only produces EPERM noise.
func (m *mounter) tryBind() bool {
	return m.method == MountBind || (m.method == MountAuto && os.Geteuid() == 0)
}

// stagedView returns the path through which staging shows volDir, or "" when
// volDir is not staged there. bound is true for a bind mount.
func stagedView(staging, volDir string) (view string, bound bool) {
	if sameFile(staging, volDir) {
		return staging, true
	}
	link := filepath.Join(staging, stageLink)
	if isSymlink(link) && sameFile(link, volDir) {
		return link, false
	}
	return "", false
}

// stage presents volDir at the staging directory.
func (m *mounter) stage(volDir, staging string) error {
	if view, _ := stagedView(staging, volDir); view != "" {
		return nil
	}
	if err := os.MkdirAll(staging, 0o755); err != nil {
		return err
	}
	if mounted, err := isMountPoint(staging); err != nil {
		return err
	} else if mounted {
		return errInUse{staging, "another volume is mounted there"}
	}
	link := filepath.Join(staging, stageLink)
	if _, err := os.Lstat(link); err == nil {
		return errInUse{staging, "another volume is staged there"}
	}
	if m.tryBind() {
		err := bindMount(volDir, staging, false)
		if err == nil {
			return nil
		}
		if m.method == MountBind {
			return err
		}
		m.logger.Warn("bind mount failed, staging with a symlink", "path", staging, "error", err)
	}
	return os.Symlink(volDir, link)
}

// unstage undoes stage. Nothing staged is success.
func (m *mounter) unstage(staging string) error {
	if _, err := os.Lstat(staging); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := unmountAll(staging); err != nil {
		return err
	}
	link := filepath.Join(staging, stageLink)
	if isSymlink(link) {
		return os.Remove(link)
	}
	return nil
}

// publish presents volDir at target, from source (the staging mount when
// there is one, which is how real plugins share one attach among many
// publishes). readOnly is enforced for bind mounts only: a symlink cannot
// be made read-only.
func (m *mounter) publish(source, volDir, target string, readOnly bool) error {
	if sameFile(target, volDir) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	created := false
	fi, err := os.Lstat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		created = true
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0:
		return errInUse{target, "a symlink to something else is there"}
	case !fi.IsDir():
		return errInUse{target, "a file is there"}
	default:
		if mounted, err := isMountPoint(target); err != nil {
			return err
		} else if mounted {
			return errInUse{target, "another volume is mounted there"}
		}
		if empty, err := isEmptyDir(target); err != nil {
			return err
		} else if !empty {
			return errInUse{target, "the directory is not empty"}
		}
	}

	if m.tryBind() {
		if created {
			if err := os.Mkdir(target, 0o755); err != nil {
				return err
			}
		}
		err := bindMount(source, target, readOnly)
		if err == nil {
			return nil
		}
		if created {
			_ = os.Remove(target)
		}
		if m.method == MountBind {
			return err
		}
		m.logger.Warn("bind mount failed, publishing with a symlink", "path", target, "error", err)
	}
	if !created {
		// An empty directory the CO made: a symlink needs its place.
		if err := os.Remove(target); err != nil {
			return err
		}
	}
	if readOnly {
		m.logger.Debug("read-only publish with a symlink is not enforced", "path", target)
	}
	return os.Symlink(volDir, target)
}

// unpublish undoes publish and removes target, as the CSI spec requires.
// Nothing there is success.
func (m *mounter) unpublish(target string) error {
	fi, err := os.Lstat(target)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return os.Remove(target)
	}
	if err := unmountAll(target); err != nil {
		return err
	}
	// Remove, not RemoveAll: if something is still mounted here we must fail
	// rather than delete a volume's data through the mount.
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

type errInUse struct{ path, why string }

func (e errInUse) Error() string { return fmt.Sprintf("%s is in use: %s", e.path, e.why) }

func bindMount(source, target string, readOnly bool) error {
	if err := syscall.Mount(source, target, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s on %s: %w", source, target, err)
	}
	if !readOnly {
		return nil
	}
	// MS_RDONLY is ignored on the initial bind; it takes a remount.
	if err := syscall.Mount("", target, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		_ = syscall.Unmount(target, 0)
		return fmt.Errorf("remount %s read-only: %w", target, err)
	}
	return nil
}

// unmountAll unmounts path until nothing is mounted there, so that a mount
// stacked by a retried call does not survive. EINVAL is umount(2)'s "not a
// mount point", which here means done.
func unmountAll(path string) error {
	if os.Geteuid() != 0 {
		// Without privilege nothing was mounted by us; symlinks remain.
		return nil
	}
	for i := 0; i < 16; i++ {
		err := syscall.Unmount(path, 0)
		switch {
		case err == nil:
			continue
		case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOENT):
			return nil
		default:
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 16 unmounts", path)
}

// isMountPoint reports whether path is a mount point: a bind mount from the
// same filesystem has the same st_dev as its parent, so stat cannot tell;
// statx's mount-root attribute can, and /proc/self/mountinfo where the
// kernel is older.
func isMountPoint(path string) (bool, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false, err
	}
	// The kernel says so itself (statx's mount-root attribute, Linux 5.8):
	// reading the mount table instead costs a pass over every mount on
	// the machine, under the lock that mounts take, for each call.
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, real, unix.AT_SYMLINK_NOFOLLOW, 0, &stx); err == nil &&
		stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMountPath(fields[4]) == real {
			return true, nil
		}
	}
	return false, sc.Err()
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + (c - '0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false
	}
	return os.SameFile(fa, fb)
}

func isSymlink(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

func isEmptyDir(p string) (bool, error) {
	entries, err := os.ReadDir(p)
	if err != nil {
		return false, err
	}
	return len(entries) == 0, nil
}
