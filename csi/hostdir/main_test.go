package hostdir

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/testutil"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// mainArgsEnv makes the test binary run Main with these arguments
// (newline separated) instead of the tests, so Main's process behaviour
// (exit codes, signals) is tested in a real process.
const mainArgsEnv = "HOSTDIR_TEST_MAIN_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(mainArgsEnv); ok {
		os.Exit(Main(strings.Split(args, "\n"), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func startMain(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join(args, "\n"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("plugin output:\n%s", out.String())
		}
	})
	return cmd
}

func TestMainExitsOnControlFile(t *testing.T) {
	dir := testutil.TempDir(t)
	sockDir, err := os.MkdirTemp("", "hd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "csi.sock")
	ctl, audit := filepath.Join(dir, "control.json"), filepath.Join(dir, "audit.log")
	cmd := startMain(t, "-endpoint", "unix://"+sock, "-root", filepath.Join(dir, "root"), "-node-id", "n1",
		"-control-file", ctl, "-audit-log", audit, "-fail", "NodeGetInfo:1")

	conn, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	node := csipb.NewNodeClient(conn)
	// The -fail flag is armed: the first successful connection sees it.
	testutil.WaitFor(t, 10*time.Second, func() error {
		_, err := node.NodeGetInfo(ctx(t), &csipb.NodeGetInfoRequest{})
		if err == nil || !strings.Contains(err.Error(), "injected") {
			return errors.New("no injected failure yet: " + errString(err))
		}
		return nil
	})
	if _, err := node.NodeGetInfo(ctx(t), &csipb.NodeGetInfoRequest{}); err != nil {
		t.Fatalf("exp: second call ok got: %v", err)
	}

	if err := WriteControl(ctl, Control{Exit: true}); err != nil {
		t.Fatal(err)
	}
	_, _ = node.NodeGetInfo(ctx(t), &csipb.NodeGetInfoRequest{})
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != ExitCodeControl {
		t.Fatalf("exp: exit code %d got: %v", ExitCodeControl, err)
	}
	entries, err := ReadAudit(audit)
	if err != nil || len(entries) < 3 || !strings.Contains(entries[len(entries)-1].Result, "exiting") {
		t.Fatalf("exp: audit ends with the exit got: %+v %v", entries, err)
	}
}

// TestMainTopologyAndLimitFlags: -topology and -max-volumes reach
// NodeGetInfo in a real process.
func TestMainTopologyAndLimitFlags(t *testing.T) {
	dir := testutil.TempDir(t)
	sockDir, err := os.MkdirTemp("", "hd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "csi.sock")
	startMain(t, "-endpoint", "unix://"+sock, "-root", filepath.Join(dir, "root"), "-node-id", "n1",
		"-topology", "zone=a", "-topology", "rack=r1", "-max-volumes", "4")
	conn, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	node := csipb.NewNodeClient(conn)
	var info *csipb.NodeGetInfoResponse
	testutil.WaitFor(t, 10*time.Second, func() error {
		info, err = node.NodeGetInfo(ctx(t), &csipb.NodeGetInfoRequest{})
		return err
	})
	seg := info.GetAccessibleTopology().GetSegments()
	if seg["zone"] != "a" || seg["rack"] != "r1" || len(seg) != 2 || info.GetMaxVolumesPerNode() != 4 {
		t.Fatalf("exp: zone=a rack=r1 and 4 volumes got: %v", info)
	}
}

func TestMainUsageErrors(t *testing.T) {
	var out bytes.Buffer
	for _, args := range [][]string{
		{},
		{"-endpoint", "unix:///x.sock"},
		{"-endpoint", "unix:///x.sock", "-root", "/tmp/x", "-fail", "NodeGetInfo"},
		{"-endpoint", "unix:///x.sock", "-root", "/tmp/x", "extra"},
		{"-endpoint", "unix:///x.sock", "-root", "/tmp/x", "-topology", "zone"},
	} {
		if code := Main(args, &out, &out); code != 2 {
			t.Errorf("args %v exp: 2 got: %d", args, code)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
