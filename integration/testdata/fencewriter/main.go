// Command fencewriter is the workload of the fencing nemeses
// (integration/chaos, TestChaos_NetnsFencing): a process that writes to a
// single-writer volume the way a real one does, so that the test can prove
// from its records whether two writers ever wrote at once.
//
// It opens <mount>/<file> once, O_APPEND, and keeps it open for its whole
// life (as a database keeps its journal open): an unmount does not stop
// it, only killing it does. Every interval it appends one record with a
// single write and fsyncs it:
//
//	<id> <seq> <start boottime ns> <start realtime ns>
//
// and then appends the same line with the CLOCK_BOOTTIME reading taken
// after the fsync returned to its own log (-log, outside the volume):
//
//	<id> <seq> <start boottime ns> <start realtime ns> <end boottime ns>
//
// CLOCK_BOOTTIME is one clock for every process on the machine, so the
// records of writers on two nodes of a network-namespace lab (one kernel)
// compare directly. The volume file says what landed and in which order;
// the log says what the writer knows it wrote and when it finished.
//
// The mount is -mount, or $CLAIMD_MOUNT_PATH when it is not given (what
// `claimd exec` puts in its child's environment). It writes its own pid
// to -pidfile before the first record, so a fence command can kill it.
// It exits 1 on the first error; it never stops by itself otherwise.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	id := flag.String("id", "", "writer ID written in every record (no spaces)")
	mount := flag.String("mount", "", "the volume's mount path (default $CLAIMD_MOUNT_PATH)")
	file := flag.String("file", "records", "the file under the mount path to append to")
	logPath := flag.String("log", "", "the writer's own log of the records it wrote (outside the volume)")
	pidFile := flag.String("pidfile", "", "write this process's pid here before the first record")
	interval := flag.Duration("interval", 50*time.Millisecond, "time between records")
	flag.Parse()
	if err := run(*id, *mount, *file, *logPath, *pidFile, *interval); err != nil {
		fmt.Fprintln(os.Stderr, "fencewriter:", err)
		os.Exit(1)
	}
}

func run(id, mount, file, logPath, pidFile string, interval time.Duration) error {
	if id == "" || containsSpace(id) {
		return fmt.Errorf("-id: must be given, without spaces (got %q)", id)
	}
	if mount == "" {
		mount = os.Getenv("CLAIMD_MOUNT_PATH")
	}
	if mount == "" {
		return errors.New("-mount: not given and $CLAIMD_MOUNT_PATH is empty")
	}
	if logPath == "" {
		return errors.New("-log: must be given")
	}
	if interval <= 0 {
		return fmt.Errorf("-interval: must be positive (got %s)", interval)
	}
	out, err := os.OpenFile(filepath.Join(mount, file), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if pidFile != "" {
		if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return err
		}
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for seq := int64(1); ; seq++ {
		start := boottime()
		rec := fmt.Sprintf("%s %d %d %d", id, seq, start, time.Now().UnixNano())
		// One write: O_APPEND makes it land whole after every earlier
		// write to the file, whoever made it.
		if _, err := out.Write([]byte(rec + "\n")); err != nil {
			return err
		}
		if err := out.Sync(); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(log, "%s %d\n", rec, boottime()); err != nil {
			return err
		}
		<-tick.C
	}
}

func boottime() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

func containsSpace(s string) bool {
	for _, r := range s {
		if r == ' ' || r == '\t' || r == '\n' {
			return true
		}
	}
	return false
}
