package netlab

import (
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoEnv makes the test binary an echo server instead of running tests:
// the helper-process pattern, so a test can run a real OS process inside a
// host namespace through Lab.Exec.
const echoEnv = "NETLAB_TEST_ECHO"

func TestMain(m *testing.M) {
	if addr := os.Getenv(echoEnv); addr != "" {
		os.Exit(echoProcess(addr))
	}
	os.Exit(m.Run())
}

// echoProcess listens on addr, says "ready" on stdout and echoes every
// connection until its stdin closes (the test ended) or two minutes pass.
func echoProcess(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	select {
	case <-stdinClosed:
	case <-time.After(2 * time.Minute):
	}
	return 0
}
