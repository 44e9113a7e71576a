// Package fencecmd runs the operator's fence command so that it is bounded
// and leaves nothing behind: it runs in a process group of its own, the
// whole group is killed at the timeout, and whatever of the group is left
// when the command ends is killed too. A hook that starts `sleep 600` or a
// stuck `kill` cannot hold the fence past its budget or linger after it.
package fencecmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// MaxOutput is how much of the command's output is kept for the error.
const MaxOutput = 512

// Run runs command with /bin/sh -c, with env added to this process's
// environment, for at most timeout. The error says how it failed (exit
// status, killed at the timeout) with the first MaxOutput bytes of its
// output; the output is the operator's script's, never a secret of ours.
func Run(ctx context.Context, command string, env []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Env = append(os.Environ(), env...)
	// Its own group, so the group can be killed whole; the parent-death
	// signal so that a killed caller does not leave the shell running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out := &capped{max: MaxOutput}
	cmd.Stdout, cmd.Stderr = out, out
	// Output through a pipe copied by a goroutine: a grandchild holding
	// the pipe would make Wait wait for it. WaitDelay ends that wait.
	cmd.WaitDelay = 500 * time.Millisecond
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("fence command: start: %w", err)
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	timedOut := false
	select {
	case err = <-done:
	case <-ctx.Done():
		timedOut = true
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		err = <-done
	}
	// Whatever the command left in its group goes with it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	switch {
	case timedOut && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("fence command: did not finish within %s; its process group was killed (output: %q)", timeout, out.String())
	case timedOut:
		return fmt.Errorf("fence command: stopped (%v); its process group was killed (output: %q)", ctx.Err(), out.String())
	case err != nil && !errors.Is(err, exec.ErrWaitDelay):
		return fmt.Errorf("fence command: %w (output: %q)", err, out.String())
	}
	return nil
}

// capped keeps the first max bytes written to it.
type capped struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
