package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/claimd/claimd/internal/fencewatch"
	"github.com/claimd/claimd/internal/leasefile"
)

// Exit codes of `claimd exec` when it ended the command itself (the
// command's own status is passed through otherwise).
const (
	exitExecFenced  = 3 // the node lease could not be shown live
	exitExecStopped = 4 // the agent released the claim
)

// leaseFileFlags are -data-dir and -lease-file, shared by exec and keeper.
type leaseFileFlags struct {
	dataDir, leaseFile string
}

func (l *leaseFileFlags) register(fs interface {
	StringVar(p *string, name, value, usage string)
}) {
	fs.StringVar(&l.dataDir, "data-dir", "", "the client agent's data dir, where it publishes node-lease.json (default "+fencewatch.DefaultDataDir+")")
	fs.StringVar(&l.leaseFile, "lease-file", "", "the node lease file itself (instead of -data-dir)")
}

func (l *leaseFileFlags) path() (string, error) {
	switch {
	case l.dataDir != "" && l.leaseFile != "":
		return "", errors.New("-data-dir and -lease-file: give one, not both")
	case l.leaseFile != "":
		return l.leaseFile, nil
	case l.dataDir != "":
		return leasefile.Path(l.dataDir), nil
	}
	return leasefile.Path(fencewatch.DefaultDataDir), nil
}

const execUsage = "usage: claimd exec -alloc ID [-volume VOL] [-data-dir DIR | -lease-file PATH] [-kill-grace D] [-wait D] -- COMMAND [ARGS...]"

// runExec runs a command as the workload of an allocation: it starts once
// the agent has mounted the volume and shows its lease live, and it is
// ended (its process group SIGTERMed, SIGKILLed after the grace) when the
// lease file says the lease cannot be shown live or the agent released
// the claim. It depends on the file only, not on the agent process: an
// agent that crashed, hangs or is paused stops renewing the file, and the
// deadline in it runs out here as it does on the servers.
func runExec(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("exec", stderr)
	alloc := fs.String("alloc", "", "the allocation whose workload the command is (required)")
	volume := fs.String("volume", "", "the volume the command uses (default: the allocation's only volume on this node)")
	var lf leaseFileFlags
	lf.register(fs)
	grace := fs.Duration("kill-grace", 0, "time between SIGTERM and SIGKILL when the command is ended (default: half the lease file's fence window for fence-policy claims, "+fencewatch.DefaultStopGrace.String()+" otherwise; a fence never waits past the lease's deadline)")
	wait := fs.Duration("wait", 5*time.Minute, "how long to wait for the volume to be mounted and the lease shown live before giving up (0: no limit)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	path, err := lf.path()
	switch {
	case err != nil:
		return fail(stderr, "%v", err)
	case *alloc == "":
		return fail(stderr, "-alloc: required (the allocation whose workload the command is)\n%s", execUsage)
	case fs.NArg() == 0:
		return fail(stderr, "no command to run\n%s", execUsage)
	case *grace < 0:
		return fail(stderr, "-kill-grace: %s is negative", *grace)
	case *wait < 0:
		return fail(stderr, "-wait: %s is negative", *wait)
	}
	// Signals are taken from here on: before the start they end the wait,
	// after it they are passed to the command's group.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)

	x := &execRun{path: path, alloc: *alloc, volume: *volume, grace: *grace, stderr: stderr, bootID: leasefile.BootID()}
	claim, last, code := x.waitReady(*wait, sigs)
	if code >= 0 {
		return code
	}
	return x.runCommand(claim, last, fs.Args(), sigs)
}

type execRun struct {
	path          string
	alloc, volume string
	grace         time.Duration
	stderr        io.Writer
	bootID        string
}

func (x *execRun) say(format string, args ...any) {
	fmt.Fprintf(x.stderr, "claimd exec: "+format+"\n", args...)
}

// waitReady polls the file until the claim may start (the claim and the
// file it was judged on, code -1), or gives up (the exit code).
func (x *execRun) waitReady(limit time.Duration, sigs <-chan os.Signal) (leasefile.Claim, *leasefile.File, int) {
	began := time.Now()
	tick := time.NewTicker(fencewatch.PollInterval)
	defer tick.Stop()
	var said string
	var saidAt time.Time
	for {
		f, err := leasefile.Read(x.path)
		s := fencewatch.CheckStart(f, err, x.alloc, x.volume, leasefile.Now(), x.bootID)
		switch {
		case s.Err != nil:
			return leasefile.Claim{}, nil, fail(x.stderr, "%v", s.Err)
		case s.Ready:
			return s.Claim, f, -1
		}
		// Progress: each new reason at once, the same one every 5 s.
		if s.Wait != said || time.Since(saidAt) >= 5*time.Second {
			x.say("waiting (%s of %s): %s [%s]", time.Since(began).Round(time.Second), waitLimit(limit), s.Wait, x.path)
			said, saidAt = s.Wait, time.Now()
		}
		if limit > 0 && time.Since(began) >= limit {
			return leasefile.Claim{}, nil, fail(x.stderr, "-wait: gave up after %s: %s; the command was not started", limit, s.Wait)
		}
		select {
		case <-tick.C:
		case sig := <-sigs:
			return leasefile.Claim{}, nil, fail(x.stderr, "%s before the command started; it was not started", sig)
		}
	}
}

func waitLimit(d time.Duration) string {
	if d == 0 {
		return "no limit"
	}
	return d.String()
}

// runCommand starts the command tied to claim and watches the file until
// it ends.
func (x *execRun) runCommand(claim leasefile.Claim, last *leasefile.File, argv []string, sigs <-chan os.Signal) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "CLAIMD_ALLOC_ID="+claim.AllocID, "CLAIMD_VOLUME_ID="+claim.VolumeID,
		"CLAIMD_MOUNT_PATH="+claim.MountPath, "CLAIMD_NODE_ID="+last.NodeID)
	// The workload's own output, not ours: straight to our descriptors.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Its own process group, so that a stop reaches everything it
	// started; SIGKILL when this process dies (kill -9 included), so that
	// killing the wrapper cannot leave the writer running unwatched.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fail(x.stderr, "start %s: %v", argv[0], err)
	}
	pgid := cmd.Process.Pid
	x.say("started %s as pid %d for allocation %s volume %s at %s (%s policy)", argv[0], pgid, claim.AllocID, claim.VolumeID, claim.MountPath, claim.NodeLost)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	// Whatever the command left in its group goes with it.
	defer func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }()

	tick := time.NewTicker(fencewatch.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return x.ended(claim, exitStatus(cmd.ProcessState))
		case sig := <-sigs:
			// Passed on; the command decides how to end, and the lease
			// is still watched meanwhile.
			_ = syscall.Kill(-pgid, sig.(syscall.Signal))
			continue
		case <-tick.C:
		}
		f, _ := leasefile.Read(x.path)
		now := leasefile.Now()
		v := fencewatch.Check(f, claim, now, x.bootID)
		if f != nil && f.BootID == x.bootID {
			last = f
		}
		if v == leasefile.Hold {
			continue
		}
		grace := fencewatch.KillGrace(last, claim, v, x.grace, now)
		x.say("%s; ending allocation %s's command (pid %d): SIGTERM to its process group, SIGKILL after %s", fencewatch.Reason(v), claim.AllocID, pgid, grace.Round(time.Millisecond))
		x.stop(pgid, grace, done)
		if v == leasefile.Fence {
			return exitExecFenced
		}
		return exitExecStopped
	}
}

// ended is exec's status when the command ended on its own: its own,
// unless the file says the claim is being released or fenced. The agent
// unmounts right after it marks the claim Stopping, and a command that
// notices the volume gone first ends before the next poll; the status
// then says why, so that a supervisor does not start it again here.
func (x *execRun) ended(claim leasefile.Claim, code int) int {
	f, _ := leasefile.Read(x.path)
	switch v := fencewatch.Check(f, claim, leasefile.Now(), x.bootID); v {
	case leasefile.Fence:
		x.say("the command ended (status %d) with the node lease no longer shown live; %s", code, fencewatch.Reason(v))
		return exitExecFenced
	case leasefile.Stop:
		x.say("the command ended (status %d) while the agent released the claim; %s", code, fencewatch.Reason(v))
		return exitExecStopped
	}
	return code
}

// stop ends the group: SIGTERM, then SIGKILL once the grace is over
// (at once for no grace), and waits for the command.
func (x *execRun) stop(pgid int, grace time.Duration, done <-chan struct{}) {
	if grace > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-done
	x.say("the command has ended")
}

// exitStatus is the command's exit code, 128+N for a signal as shells do.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
