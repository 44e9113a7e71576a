package netlab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	// namePrefix starts every namespace name the lab creates, followed by
	// the pid of the test process, so that a later run can tell a leftover
	// of a crashed run (pid gone) from a lab of a run still going.
	namePrefix = "cld-"

	// Subnet is the lab's only network. It exists only inside the lab's
	// namespaces; host i gets 10.213.7.(10+i).
	Subnet = "10.213.7.0/24"

	subnetBase = "10.213.7."
	firstHost  = 10
	maxHosts   = 240

	// requiredEnv turns New's skip into a failure when set, for CI, which
	// installs the tools and must not pass by skipping.
	requiredEnv = "CLAIMD_NETLAB_REQUIRED"

	netnsDir = "/var/run/netns"
)

var (
	labSeq    atomic.Int64
	hostName  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$`)
	labNsName = regexp.MustCompile(`^` + namePrefix + `([0-9]+)-`)
)

// Lab is a set of host namespaces joined by one bridge. Its methods are safe
// for concurrent use; the fault methods are serialised so that rules are
// applied in the order the calls were made. The fault methods log through
// the test's t.Logf, so a nemesis goroutine must stop calling them before
// the test returns.
type Lab struct {
	t      testing.TB
	prefix string // "cld-<pid>-<seq>-"
	sw     string // switch namespace
	order  []string
	hosts  map[string]*host

	mu      sync.Mutex
	faults  map[link]fault
	applied map[string]string // host → rule lines in force in its namespace
}

type host struct {
	ns   string
	addr string
	port string // the veth end in the switch namespace
}

// New builds a lab with one namespace per host, removed again when the test
// ends (any process still running in a host namespace is killed first). It
// skips the test when Available reports an error, or fails it if the
// environment variable CLAIMD_NETLAB_REQUIRED is set. Host names are short
// labels ([A-Za-z0-9_.-], at most 32 characters), unique within the lab.
func New(t testing.TB, hosts ...string) *Lab {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv(requiredEnv) != "" {
			t.Fatalf("%v (%s is set)", err, requiredEnv)
		}
		t.Skip(err.Error())
	}
	if len(hosts) == 0 || len(hosts) > maxHosts {
		t.Fatalf("netlab: need 1 to %d hosts, got %d", maxHosts, len(hosts))
	}
	removeStale(t)

	prefix := fmt.Sprintf("%s%d-%d-", namePrefix, os.Getpid(), labSeq.Add(1))
	l := &Lab{
		t:       t,
		prefix:  prefix,
		sw:      prefix + "sw",
		hosts:   map[string]*host{},
		faults:  map[link]fault{},
		applied: map[string]string{},
	}
	for i, name := range hosts {
		if !hostName.MatchString(name) {
			t.Fatalf("netlab: bad host name %q: want [A-Za-z0-9_.-], at most 32 characters", name)
		}
		if _, dup := l.hosts[name]; dup {
			t.Fatalf("netlab: host %q given twice", name)
		}
		l.hosts[name] = &host{
			ns:   prefix + "h-" + name,
			addr: subnetBase + strconv.Itoa(firstHost+i),
			port: "p" + strconv.Itoa(i),
		}
		l.order = append(l.order, name)
	}
	// Registered before anything exists so that a setup failing half way
	// still removes what it made.
	var created []string
	t.Cleanup(func() { l.destroy(created) })
	if err := l.setup(&created); err != nil {
		t.Fatalf("netlab: %v", err)
	}
	var desc []string
	for _, name := range l.order {
		desc = append(desc, name+"="+l.hosts[name].addr)
	}
	t.Logf("netlab: lab %s* up on %s: %s", prefix, Subnet, strings.Join(desc, " "))
	return l
}

// setup creates the switch namespace with its bridge, then each host
// namespace with lo up and a veth whose other end is a port of the bridge.
// created collects the namespaces made so far, for cleanup.
func (l *Lab) setup(created *[]string) error {
	if _, err := command("", "ip", "netns", "add", l.sw); err != nil {
		return err
	}
	*created = append(*created, l.sw)
	if err := ipv4Only(l.sw); err != nil {
		return err
	}
	// STP stays off (the default): with one bridge there is no loop to find,
	// and STP would hold new ports in listening/learning for seconds.
	if _, err := command("link add br0 type bridge stp_state 0\nlink set dev br0 up\n", "ip", "-n", l.sw, "-batch", "-"); err != nil {
		return err
	}
	var ports strings.Builder
	for _, name := range l.order {
		h := l.hosts[name]
		if _, err := command("", "ip", "netns", "add", h.ns); err != nil {
			return err
		}
		*created = append(*created, h.ns)
		if err := ipv4Only(h.ns); err != nil {
			return err
		}
		// "dev" before every device name: iproute2 otherwise reads a short
		// name like "a" as an abbreviated keyword.
		batch := "link set dev lo up\n" +
			"link add eth0 type veth peer name " + h.port + " netns " + l.sw + "\n" +
			"addr add " + h.addr + "/24 dev eth0\n" +
			"link set dev eth0 up\n"
		if _, err := command(batch, "ip", "-n", h.ns, "-batch", "-"); err != nil {
			return err
		}
		if _, err := inNetns(h.ns, tableScript(""), "nft", "-f", "-"); err != nil {
			return err
		}
		fmt.Fprintf(&ports, "link set dev %s master br0 up\n", h.port)
	}
	_, err := command(ports.String(), "ip", "-n", l.sw, "-batch", "-")
	return err
}

// ipv4Only turns IPv6 off in a fresh namespace (for interfaces that exist
// and those made later), before any link is added. The lab is an IPv4
// network and its faults match IPv4 addresses; without this every link
// would get an IPv6 link-local address, the switch would not be address-free,
// and a process could in principle talk around a cut over IPv6. The sysctls
// are the namespace's own: /proc/sys/net shows the namespace of the thread
// that opens it.
func ipv4Only(ns string) error {
	_, err := inNamespace(filepath.Join(netnsDir, ns), func() (struct{}, error) {
		for _, dev := range []string{"all", "default"} {
			path := "/proc/sys/net/ipv6/conf/" + dev + "/disable_ipv6"
			if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
				return struct{}{}, fmt.Errorf("disable IPv6 in %s: %w", ns, err)
			}
		}
		return struct{}{}, nil
	})
	return err
}

// destroy kills what still runs in the lab's host namespaces and deletes the
// namespaces. A namespace whose name is deleted lives on while a process is
// inside it, hence the kill; the processes are the test's own (started with
// Exec), and the harness that started them has normally stopped them
// already, its cleanups running before this one.
func (l *Lab) destroy(created []string) {
	for _, ns := range created {
		out, err := command("", "ip", "netns", "pids", ns)
		if err != nil {
			l.t.Errorf("netlab: cleanup: %v", err)
			continue
		}
		for _, f := range strings.Fields(out) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				l.t.Logf("netlab: cleanup: killed pid %d left running in %s", pid, ns)
			}
		}
	}
	// Hosts first, the switch last: deleting a host namespace deletes its
	// veth and so the bridge port; the switch then goes empty.
	for i := len(created) - 1; i >= 0; i-- {
		if _, err := command("", "ip", "netns", "del", created[i]); err != nil {
			l.t.Errorf("netlab: cleanup: %v", err)
		}
	}
}

// removeStale deletes lab namespaces ("cld-<pid>-…") whose pid is no longer
// running: what a crashed or killed earlier run left behind. A live pid's
// namespaces are left alone, whoever owns them (another test binary may be
// running its own lab right now).
func removeStale(t testing.TB) {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return // no named namespace exists yet
	}
	self := os.Getpid()
	for _, e := range entries {
		m := labNsName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == self || !pidDead(pid) {
			continue
		}
		if _, err := command("", "ip", "netns", "del", e.Name()); err != nil {
			t.Logf("netlab: could not remove stale namespace %s: %v", e.Name(), err)
			continue
		}
		t.Logf("netlab: removed stale namespace %s (pid %d is gone)", e.Name(), pid)
	}
}

func pidDead(pid int) bool {
	return errors.Is(unix.Kill(pid, 0), unix.ESRCH)
}

func (l *Lab) host(name string) *host {
	h, ok := l.hosts[name]
	if !ok {
		panic(fmt.Sprintf("netlab: unknown host %q (lab has %v)", name, l.order))
	}
	return h
}

// Hosts returns the host names in the order given to New.
func (l *Lab) Hosts() []string { return append([]string(nil), l.order...) }

// Addr returns host's IPv4 address (no port). It panics on an unknown host.
func (l *Lab) Addr(host string) string { return l.host(host).addr }

// Namespace returns the name of host's network namespace, as `ip netns`
// knows it. It panics on an unknown host.
func (l *Lab) Namespace(host string) string { return l.host(host).ns }

// Exec returns a command that runs name with args inside host's namespace.
// `ip netns exec` execs the program in place, so cmd.Process is the
// program itself: signals sent to it (SIGKILL, SIGSTOP) reach it, not a
// wrapper. It panics on an unknown host.
func (l *Lab) Exec(host, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", l.host(host).ns, name}, args...)...)
}
