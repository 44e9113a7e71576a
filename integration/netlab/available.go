package netlab

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
)

// Available reports whether this machine can run a lab: nil when the process
// is root on Linux, `ip` and `nft` are installed and a network namespace with
// a bridge, a veth pair and an nftables table can actually be created. The
// error says what is missing, in words fit for a t.Skip message. The probe
// runs once per process.
func Available() error { return availableOnce() }

var availableOnce = sync.OnceValue(probe)

func probe() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("netlab: needs Linux network namespaces (running on %s)", runtime.GOOS)
	}
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Errorf("netlab: needs root to create network namespaces (running as uid %d)", uid)
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("netlab: %s not found in PATH (apt-get install -y nftables iproute2)", tool)
		}
	}
	// Try the real thing in a throw-away namespace: a container may be root
	// with the tools installed and still lack CAP_SYS_ADMIN or a kernel module.
	ns := fmt.Sprintf("%s%d-probe", namePrefix, os.Getpid())
	if _, err := command("", "ip", "netns", "add", ns); err != nil {
		return fmt.Errorf("netlab: cannot create a network namespace: %v", err)
	}
	defer func() { _, _ = command("", "ip", "netns", "del", ns) }()
	if _, err := command("", "ip", "-n", ns, "link", "add", "br0", "type", "bridge"); err != nil {
		return fmt.Errorf("netlab: cannot create a Linux bridge in a namespace: %v", err)
	}
	if _, err := command("", "ip", "-n", ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1"); err != nil {
		return fmt.Errorf("netlab: cannot create a veth pair in a namespace: %v", err)
	}
	if _, err := inNetns(ns, tableScript(""), "nft", "-f", "-"); err != nil {
		return fmt.Errorf("netlab: nftables does not work in a namespace: %v", err)
	}
	return nil
}
