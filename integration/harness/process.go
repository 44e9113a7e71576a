package harness

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary builds cmd/claimd once per test process and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "claimd-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "claimd")
		root, err := moduleRoot()
		if err != nil {
			buildErr = err
			return
		}
		cmd := exec.Command("go", "build", "-o", buildPath, "./cmd/claimd")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build claimd: %v", buildErr)
	}
	return buildPath
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// Process is a claimd OS process (an agent) started by a test.
type Process struct {
	Name string
	Args []string
	// bin is the claimd binary it runs (Binary when empty).
	bin  string
	cmd  *exec.Cmd
	log  *lockedBuffer
	done chan struct{}
	t    testing.TB
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// StartProcess runs `claimd args...` and stops it (SIGKILL) at test end.
// Its output is logged if the test fails.
//
// An agent gets an HTTP API on a free port unless the arguments choose
// one (-http-addr, or -config): the default 127.0.0.1:4646 would be taken
// by the first of several agents on this machine.
func StartProcess(t testing.TB, name string, args ...string) *Process {
	t.Helper()
	return StartProcessWith(t, "", name, args...)
}

// StartProcessWith is StartProcess with another claimd binary (an earlier
// build, for upgrade tests); "" is this build.
func StartProcessWith(t testing.TB, bin, name string, args ...string) *Process {
	t.Helper()
	if len(args) > 0 && args[0] == "agent" && !slices.Contains(args, "-http-addr") && !slices.Contains(args, "-config") {
		args = append(args, "-http-addr", FreeAddr(t))
	}
	p := &Process{Name: name, Args: args, bin: bin, t: t}
	p.start()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", p.Name, p.Output())
		}
	})
	return p
}

func (p *Process) start() {
	bin := p.bin
	if bin == "" {
		bin = Binary(p.t)
	}
	p.cmd = exec.Command(bin, p.Args...)
	p.log = &lockedBuffer{}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.done = make(chan struct{})
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.Name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
}

// PID is the process's operating-system ID (for /proc readings).
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Kill sends SIGKILL and waits for the process to exit.
func (p *Process) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Signal sends sig and waits up to timeout for the exit.
func (p *Process) Signal(sig syscall.Signal, timeout time.Duration) error {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %s of %s", p.Name, timeout, sig)
	}
}

// Restart starts the process again with the same arguments.
func (p *Process) Restart() {
	p.Kill()
	p.start()
}

// Replace stops the process with SIGTERM (an operator's stop: SIGKILL
// after timeout) and starts bin ("" for this build) with the same
// arguments: one step of a rolling upgrade.
func (p *Process) Replace(bin string, timeout time.Duration) error {
	err := p.Signal(syscall.SIGTERM, timeout)
	p.Kill()
	p.bin = bin
	p.start()
	return err
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Output is everything the process printed so far.
func (p *Process) Output() string { return p.log.String() }

// CLIResult is one CLI run.
type CLIResult struct {
	Code           int
	Stdout, Stderr string
}

// RunCLI runs `claimd args...` to completion (bounded at 60 s).
func RunCLI(t testing.TB, args ...string) CLIResult {
	t.Helper()
	return RunCLIEnv(t, nil, args...)
}

// RunCLIEnv is RunCLI with extra environment variables ("K=V").
func RunCLIEnv(t testing.TB, env []string, args ...string) CLIResult {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatalf("run claimd %v: %v", args, err)
	}
	timer := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	_ = cmd.Wait()
	return CLIResult{Code: cmd.ProcessState.ExitCode(), Stdout: out.String(), Stderr: errb.String()}
}

// FreeAddr reserves a loopback address for a process to listen on.
func FreeAddr(t testing.TB) string { return freeAddr(t) }

// JoinOthers is the -join value for the server at addrs[i]: every other
// address, comma-separated.
func JoinOthers(addrs []string, i int) string {
	others := make([]string, 0, len(addrs))
	for j, a := range addrs {
		if j != i {
			others = append(others, a)
		}
	}
	return strings.Join(others, ",")
}
