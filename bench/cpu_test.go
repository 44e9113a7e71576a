package bench

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestCPUMeter_RefusesWhatItCannotMeasureHonestly: the meter measures
// only servers that are processes of their own on this machine, and says
// why otherwise.
func TestCPUMeter_RefusesWhatItCannotMeasureHonestly(t *testing.T) {
	self := os.Getpid()
	for _, tc := range []struct {
		name    string
		servers []string
		pids    map[string]int
		err     error
		want    string
	}{
		{"not loopback", []string{"10.0.0.1:4647"}, nil, nil, "not on a loopback address"},
		{"in this process", []string{"127.0.0.1:1"}, map[string]int{"127.0.0.1:1": self}, nil, "inside this process"},
		{"shared process", []string{"127.0.0.1:1", "127.0.0.1:2"}, map[string]int{"127.0.0.1:1": 1, "127.0.0.1:2": 1}, nil, "share process 1"},
		{"no pid", []string{"127.0.0.1:1"}, map[string]int{}, nil, "reports no process ID"},
		{"denied", []string{"127.0.0.1:1"}, nil, errors.New("permission denied"), "did not report its process ID: permission denied"},
		{"no such process", []string{"127.0.0.1:1"}, map[string]int{"127.0.0.1:1": 1 << 30}, nil, "read CPU time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newCPUMeter(t.Context(), tc.servers, func(_ context.Context, addr string) (int, error) {
				return tc.pids[addr], tc.err
			})
			if len(m.servers) != 0 || !strings.Contains(m.reason, tc.want) {
				t.Fatalf("exp: no meter, reason containing %q got: %v, %q", tc.want, m.servers, m.reason)
			}
			var res Result
			m.measure(window{start: time.Now(), end: time.Now()})(&res)
			if res.ServerCPU != nil || res.NoCPU != m.reason {
				t.Fatalf("exp: the reason in the result got: %v, %q", res.ServerCPU, res.NoCPU)
			}
		})
	}
}

// TestCPUMeter_MeasuresAProcess: a busy child process's CPU time over a
// window is read from /proc and shows up per server and per cycle.
func TestCPUMeter_MeasuresAProcess(t *testing.T) {
	// A bounded busy loop (a few seconds of one core at most), killed at
	// the end of the test.
	busy := exec.Command("sh", "-c", "i=0; while [ $i -lt 20000000 ]; do i=$((i+1)); done")
	if err := busy.Start(); err != nil {
		t.Skipf("no sh to run a busy child: %v", err)
	}
	t.Cleanup(func() {
		_ = busy.Process.Kill()
		_ = busy.Wait()
	})
	idle := exec.Command("sleep", "60")
	if err := idle.Start(); err != nil {
		t.Skipf("no sleep to run an idle child: %v", err)
	}
	t.Cleanup(func() {
		_ = idle.Process.Kill()
		_ = idle.Wait()
	})
	pids := map[string]int{"127.0.0.1:1": busy.Process.Pid, "127.0.0.1:2": idle.Process.Pid}
	m := newCPUMeter(t.Context(), []string{"127.0.0.1:1", "127.0.0.1:2"}, func(_ context.Context, addr string) (int, error) {
		return pids[addr], nil
	})
	if m.reason != "" {
		t.Fatalf("exp: a meter got: %s", m.reason)
	}
	// The child gets CPU whenever the machine has some to give: poll
	// windows until one shows a tick of it, with a deadline.
	deadline := time.Now().Add(20 * time.Second)
	for {
		w := window{start: time.Now(), end: time.Now().Add(300 * time.Millisecond)}
		res := Result{Address: "127.0.0.1:1", Seconds: 0.3}
		finish := m.measure(w)
		<-time.After(time.Until(w.end) + 10*time.Millisecond) // the window being measured
		finish(&res)
		if res.NoCPU != "" || len(res.ServerCPU) != 2 {
			t.Fatalf("exp: both servers measured got: %v (%q)", res.ServerCPU, res.NoCPU)
		}
		if res.ServerCPU[0].PID != busy.Process.Pid || res.ServerCPU[1].Seconds != 0 {
			t.Fatalf("exp: servers by address, the idle one at 0 s got: %+v", res.ServerCPU)
		}
		if res.CPUSeconds > 0 {
			if res.TargetCPUSeconds != res.CPUSeconds || res.CPUWallSeconds < 0.2 {
				t.Fatalf("exp: the busy target's CPU is all of it, over the window got: %+v", res)
			}
			res.setCycles(10)
			if want := 1000 * res.CPUSeconds / 10; res.CPUMSPerCycle != want || res.TargetCPUMSPerCycle != want {
				t.Fatalf("exp: %.3f ms per cycle got: %.3f / %.3f", want, res.TargetCPUMSPerCycle, res.CPUMSPerCycle)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("exp: the busy child used some CPU within 20 s got: none")
		}
	}
}

// TestParseCPUTicks_CommandWithSpaces: fields are counted after the
// command name's last closing parenthesis (a name may hold spaces and
// parentheses); utime and stime are fields 14 and 15.
func TestParseCPUTicks_CommandWithSpaces(t *testing.T) {
	line := "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 123 45 0 0 20 0 12 0 9999 1000000 500\n"
	n, err := parseCPUTicks(line)
	if err != nil || n != 168 {
		t.Fatalf("exp: 123+45 = 168 ticks got: %d, %v", n, err)
	}
	if _, err := parseCPUTicks("4242 (cmd) S 1 2"); err == nil {
		t.Fatal("exp: a short line refused got: nil")
	}
	if n, err := readCPUTicks(os.Getpid()); err != nil || n < 0 {
		t.Fatalf("exp: own CPU ticks got: %d, %v", n, err)
	}
}
