package netlab

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/testutil"
)

func TestAvailable_ReportsWhatIsMissing(t *testing.T) {
	err := Available()
	if os.Geteuid() != 0 {
		if err == nil || !strings.Contains(err.Error(), "root") {
			t.Fatalf("exp: an error that asks for root got: %v", err)
		}
		return
	}
	if err != nil {
		t.Skip(err.Error())
	}
}

func TestLab_TwoHostsTalkOverTheBridge(t *testing.T) {
	t.Parallel()
	lab := New(t, "a", "b")

	out, err := lab.Exec("a", "ip", "-4", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), lab.Addr("a")+"/24") {
		t.Fatalf("exp: eth0 of a has %s/24 got: %q (%v)", lab.Addr("a"), out, err)
	}

	// Nothing can leave the lab: hosts know only the lab's subnet (no
	// default route), and the switch has no address at all.
	routes, err := command("", "ip", "-n", lab.Namespace("a"), "-4", "route", "show")
	if err != nil || strings.TrimSpace(routes) == "" || strings.Contains(routes, "default") {
		t.Fatalf("exp: only the lab subnet routed in a got: %q (%v)", routes, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(routes), "\n") {
		if !strings.HasPrefix(line, "10.213.7.0/24 ") {
			t.Fatalf("exp: only %s routed in a got: %q", Subnet, routes)
		}
	}
	if addrs, err := command("", "ip", "-n", lab.sw, "addr", "show"); err != nil || strings.Contains(addrs, "inet") {
		t.Fatalf("exp: no address in the switch namespace got: %q (%v)", addrs, err)
	}

	if addrs, err := command("", "ip", "-n", lab.Namespace("a"), "addr", "show"); err != nil || strings.Contains(addrs, "inet6") {
		t.Fatalf("exp: IPv4 only in a got: %q (%v)", addrs, err)
	}
	// A wildcard listener still works (Go may pick a dual-stack IPv6
	// socket for it, which needs no IPv6 address).
	wild, err := lab.Listen("a", ":0")
	if err != nil {
		t.Fatalf("wildcard listen in a: %v", err)
	}
	serveEcho(t, wild)
	_, port, _ := net.SplitHostPort(wild.Addr().String())
	wc, err := dial(lab, "b", net.JoinHostPort(lab.Addr("a"), port), 5*time.Second)
	if err != nil {
		t.Fatalf("dial wildcard listener: %v", err)
	}
	if err := roundTrip(wc, "wildcard"); err != nil {
		t.Fatal(err)
	}
	wc.Close()

	// A real OS process inside a's namespace (this test binary as an echo
	// server), reached from b's namespace by the test process.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(lab.Addr("a"), "7000")
	cmd := lab.Exec("a", exe)
	cmd.Env = append(os.Environ(), echoEnv+"="+target)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("exp: ready got: %q", line)
		}
		ready <- err
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("echo process: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("echo process: not ready after 10s")
	}

	c, err := dial(lab, "b", target, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s from b: %v", target, err)
	}
	defer c.Close()
	if host, _, _ := net.SplitHostPort(c.LocalAddr().String()); host != lab.Addr("b") {
		t.Fatalf("exp: connection from %s got: from %s", lab.Addr("b"), c.LocalAddr())
	}
	if err := roundTrip(c, "hello through the bridge"); err != nil {
		t.Fatal(err)
	}
}

func TestLab_CleanupRemovesNamespacesAndProcesses(t *testing.T) {
	requireLab(t)
	var prefix string
	var sleeper *exec.Cmd
	t.Run("lab", func(t *testing.T) {
		lab := New(t, "a", "b", "c")
		prefix = lab.prefix
		sleeper = lab.Exec("b", "sleep", "60")
		if err := sleeper.Start(); err != nil {
			t.Fatal(err)
		}
		// ip netns exec execs in place: the Cmd's pid is the program's, so
		// a harness can signal it directly.
		// (Polled: the pid enters the namespace once ip has set it up.)
		testutil.WaitFor(t, 5*time.Second, func() error {
			pids, err := command("", "ip", "netns", "pids", lab.Namespace("b"))
			if err == nil && strings.TrimSpace(pids) != strconv.Itoa(sleeper.Process.Pid) {
				err = fmt.Errorf("exp: pid %d in b got: %q", sleeper.Process.Pid, pids)
			}
			return err
		})
		if got := namespacesWith(t, prefix); len(got) != 4 {
			t.Fatalf("exp: 4 namespaces (switch + 3 hosts) got: %v", got)
		}
	})
	if got := namespacesWith(t, prefix); len(got) != 0 {
		t.Fatalf("exp: no namespace with prefix %s after the test got: %v", prefix, got)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = sleeper.Process.Kill()
		t.Fatal("exp: process left in the lab killed at cleanup got: still running after 10s")
	}
}

func TestLab_RemovesStaleNamespacesOfDeadRunsOnly(t *testing.T) {
	requireLab(t)
	// A pid known to be dead: a process that has been waited for.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%s%d-1-sw", namePrefix, gone.Process.Pid)
	// A pid known to be alive, as another test run's would be.
	alive := exec.Command("sleep", "60")
	if err := alive.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = alive.Process.Kill(); _ = alive.Wait() }()
	live := fmt.Sprintf("%s%d-1-sw", namePrefix, alive.Process.Pid)
	for _, ns := range []string{stale, live} {
		if _, err := command("", "ip", "netns", "add", ns); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { _, _ = command("", "ip", "netns", "del", live) }()

	removeStale(t)

	if got := namespacesWith(t, stale); len(got) != 0 {
		t.Fatalf("exp: stale namespace %s removed got: %v", stale, got)
	}
	if got := namespacesWith(t, live); len(got) != 1 {
		t.Fatalf("exp: namespace of live pid %s kept got: %v", live, got)
	}
}

// namespacesWith lists the named namespaces (as `ip netns list` shows
// them) whose names start with prefix.
func namespacesWith(t testing.TB, prefix string) []string {
	t.Helper()
	out, err := command("", "ip", "netns", "list")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			got = append(got, f[0])
		}
	}
	return got
}
