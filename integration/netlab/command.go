package netlab

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// commandTimeout bounds every ip/nft invocation. They take a few
// milliseconds; one that hangs (a wedged netlink socket, a stuck mount)
// must fail the test instead of hanging it until the go test timeout.
const commandTimeout = 20 * time.Second

// command runs name with args, feeding it stdin when non-empty, and returns
// its standard output. The error carries the command line and its standard
// error, which is where ip and nft say what went wrong.
func command(stdin, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// inNetns runs a command inside the named namespace. It forks the command
// from a thread switched into the namespace (a child inherits its parent
// thread's namespace) rather than through `ip netns exec`, which would add
// a process and a /sys remount: about half the cost of each nft call, and
// nft calls are what every fault change waits for.
func inNetns(ns, stdin, name string, args ...string) (string, error) {
	return inNamespace(filepath.Join(netnsDir, ns), func() (string, error) {
		return command(stdin, name, args...)
	})
}
