package integration

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/claimd/claimd/version"
)

// TestRelease_ArchiveIsStampedStaticAndReproducible builds the release
// archive of HEAD for linux/amd64 with scripts/release.sh (issue 29), then
// checks what an operator installing it relies on: SHA256SUMS matches the
// archive, the archive holds the binary, the systemd units and the sample
// configurations under one directory, the binary is static, and its
// `version` names the stamped version and HEAD's commit. A second build
// of the same ref gives the same bytes (with -short it shares the first
// build's Go cache; without, it starts from an empty one).
func TestRelease_ArchiveIsStampedStaticAndReproducible(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	commit := strings.TrimSpace(string(head))
	const ver = "v0.0.0-releasetest"
	name := "claimd_" + ver + "_linux_amd64"

	build := func(out string, env ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(root, "scripts", "release.sh"), "HEAD")
		cmd.Env = append(os.Environ(), append([]string{"OUT=" + out, "ARCHES=amd64", "VERSION=" + ver}, env...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("release.sh exp: success got: %v\n%s", err, b)
		}
		sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		return string(sums)
	}
	out := t.TempDir()
	sums := build(out)

	archive := filepath.Join(out, name+".tar.gz")
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if want := hex.EncodeToString(sum[:]) + "  " + name + ".tar.gz\n"; sums != want {
		t.Fatalf("SHA256SUMS exp: %q got: %q", want, sums)
	}

	dir := t.TempDir()
	files := untar(t, archive, dir)
	for _, f := range []string{"claimd", "README.md", "docs/operations.md", "docs/security.md", "systemd/claimd-server.service",
		"systemd/claimd-client.service", "systemd/claimd-keeper.service", "config/server/server.hcl", "config/client/client.hcl"} {
		if !files[name+"/"+f] {
			t.Errorf("archive exp: %s/%s got: %v", name, f, files)
		}
	}
	// Every relative link in the shipped docs resolves inside the archive
	// (README and operations.md used to point at docs that were not shipped).
	link := regexp.MustCompile(`\]\(([^)#]+)(#[^)]*)?\)`)
	for f := range files {
		if !strings.HasSuffix(f, ".md") {
			continue
		}
		text, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if !files[filepath.Join(filepath.Dir(f), target)] {
				t.Errorf("%s links to %s, which the archive does not hold", f, target)
			}
		}
	}
	// The units parse as systemd reads them (where systemd-analyze is
	// installed; it cannot find the binary they name here, and only that
	// is let pass).
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		units, _ := filepath.Glob(filepath.Join(dir, name, "systemd", "*.service"))
		b, _ := exec.Command("systemd-analyze", append([]string{"verify"}, units...)...).CombinedOutput()
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if line != "" && !strings.Contains(line, "/usr/local/bin/claimd is not executable") {
				t.Errorf("systemd-analyze verify exp: no complaint but the missing binary got: %s", line)
			}
		}
	}
	bin := filepath.Join(dir, name, "claimd")
	if ef, err := elf.Open(bin); err != nil {
		t.Fatalf("binary exp: ELF got: %v", err)
	} else {
		for _, p := range ef.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("binary exp: static (no interpreter) got: dynamically linked")
			}
		}
		ef.Close()
	}
	b, err := exec.Command(bin, "version", "-json").Output()
	if err != nil {
		t.Fatalf("packaged claimd version exp: success got: %v", err)
	}
	var got version.Info
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("version -json exp: JSON got: %s", b)
	}
	if got.Version != ver || got.Commit != commit[:12] || got.GoVersion == "" {
		t.Fatalf("packaged version exp: %s, commit %s got: %+v", ver, commit[:12], got)
	}
	if b, err := exec.Command(bin, "-version").Output(); err != nil || !strings.HasPrefix(string(b), "claimd "+ver+"\n") {
		t.Fatalf("claimd -version exp: %q first got: %q, %v", "claimd "+ver, b, err)
	}

	var again []string
	if !testing.Short() {
		again = append(again, "GOCACHE="+t.TempDir())
	}
	if sums2 := build(t.TempDir(), again...); sums2 != sums {
		t.Fatalf("a second build of the same ref exp: the same bytes (%q) got: %q", sums, sums2)
	}
}

// untar extracts a .tar.gz into dir and returns the names it held.
func untar(t *testing.T, path, dir string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	names := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" {
			t.Errorf("%s exp: owned by 0:0 with no names got: %d:%d %q", h.Name, h.Uid, h.Gid, h.Uname)
		}
		name := strings.TrimSuffix(h.Name, "/")
		names[name] = true
		target := filepath.Join(dir, filepath.FromSlash(name))
		if !strings.HasPrefix(target, dir+string(os.PathSeparator)) {
			t.Fatalf("archive entry %q leaves the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			out.Close()
		}
	}
}
