package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rec is a record of the volume file (End = Start) or, with end > 0, of a
// writer's log.
func rec(w string, seq, start, end int64) fwRecord {
	if end == 0 {
		end = start
	}
	return fwRecord{Writer: w, Seq: seq, Start: start, End: end, Wall: 1_700_000_000_000_000_000 + start}
}

func TestOverlap_CleanHandoverHasNone(t *testing.T) {
	recs := []fwRecord{rec("a", 1, 10, 11), rec("a", 2, 20, 21), rec("b", 1, 30, 31), rec("b", 2, 40, 41)}
	if got := fwOverlaps(recs); len(got) != 0 {
		t.Fatalf("overlaps exp: none got: %v", got)
	}
	if got := fwFileOrder(recs); len(got) != 0 {
		t.Fatalf("file-order overlaps exp: none got: %v", got)
	}
	// One writer alone never overlaps itself, even with records out of
	// order.
	if got := fwOverlaps([]fwRecord{rec("a", 2, 20, 0), rec("a", 1, 10, 0)}); len(got) != 0 {
		t.Fatalf("single writer exp: no overlap got: %v", got)
	}
}

func TestOverlap_SecondWriterBeforeFirstsLast(t *testing.T) {
	recs := fwMerge([]fwRecord{rec("a", 1, 10, 11), rec("a", 2, 20, 21), rec("a", 3, 50, 51), rec("b", 1, 30, 31), rec("b", 2, 60, 61)})
	got := fwOverlaps(recs)
	if len(got) != 1 {
		t.Fatalf("overlaps exp: 1 got: %v", got)
	}
	o := got[0]
	if o.Earlier != "a" || o.Later != "b" || o.From != 30 || o.Until != 51 || o.Records != 1 || o.FileOrder {
		t.Fatalf("overlap exp: a's record 3 (ends 51) after b's first (30) got: %+v", o)
	}
	if !strings.Contains(o.String(), "a wrote 1 record(s) after b's first write") {
		t.Fatalf("description exp: names both writers got: %s", o)
	}
}

// A write of the first writer still in flight (stamped before, ended
// after) when the second began is an overlap: its end, from the writer's
// log, shows it.
func TestOverlap_WriteInFlightAtHandover(t *testing.T) {
	volume := []fwRecord{rec("a", 1, 10, 0), rec("a", 2, 20, 0), rec("b", 1, 30, 0)}
	if got := fwOverlaps(fwMerge(volume)); len(got) != 0 {
		t.Fatalf("volume copy alone exp: no overlap got: %v", got)
	}
	log := []fwRecord{rec("a", 2, 20, 35)}
	got := fwOverlaps(fwMerge(volume, log))
	if len(got) != 1 || got[0].Until != 35 {
		t.Fatalf("overlap exp: a's write ending at 35 got: %v", got)
	}
}

// A writer frozen between stamping a record and writing it stamps it
// early: only the file's order shows that it landed after the other's.
func TestOverlap_FileOrderCatchesEarlyStamp(t *testing.T) {
	inFile := []fwRecord{rec("a", 1, 10, 0), rec("b", 1, 30, 0), rec("a", 2, 20, 0), rec("b", 2, 40, 0)}
	if got := fwOverlaps(fwMerge(inFile)); len(got) != 0 {
		t.Fatalf("by time exp: none (a's stamp is early) got: %v", got)
	}
	got := fwFileOrder(inFile)
	if len(got) != 1 || got[0].Earlier != "a" || got[0].Later != "b" || got[0].Records != 1 || !got[0].FileOrder {
		t.Fatalf("file order exp: a after b's first got: %v", got)
	}
}

// A node that comes back after another took over (A, B, A again) and a
// chain of three writers, each pair on its own.
func TestOverlap_ReturningWriterAndChains(t *testing.T) {
	got := fwOverlaps(fwMerge([]fwRecord{rec("a", 1, 10, 0), rec("b", 1, 20, 0), rec("b", 2, 30, 0), rec("a", 2, 40, 0)}))
	if len(got) != 1 || got[0].Earlier != "a" || got[0].Until != 40 {
		t.Fatalf("returning writer exp: a after b got: %v", got)
	}
	chain := []fwRecord{rec("a", 1, 10, 0), rec("b", 1, 20, 0), rec("c", 1, 30, 0), rec("b", 2, 35, 0)}
	got = fwOverlaps(fwMerge(chain))
	if len(got) != 1 || got[0].Earlier != "b" || got[0].Later != "c" {
		t.Fatalf("chain exp: only b after c got: %v", got)
	}
}

func TestOverlap_ParseAndCheckFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The volume file: a's last line landed after b's first (file order)
	// and the last line was cut by a kill.
	vol := write("records", "a 1 10 1000\nb 1 30 1020\na 2 40 1030\nb 2 5")
	la := write("a.log", "a 1 10 1000 12\na 2 40 1030 45\n")
	lb := write("b.log", "b 1 30 1020 31\n")
	got, counts, err := fwCheck(vol, la, lb, filepath.Join(dir, "missing.log"))
	if err != nil {
		t.Fatal(err)
	}
	if counts["a"] != 2 || counts["b"] != 1 {
		t.Fatalf("counts exp: a 2, b 1 (b's cut line skipped) got: %v", counts)
	}
	var byTime, byFile int
	for _, o := range got {
		if o.FileOrder {
			byFile++
		} else {
			byTime++
		}
	}
	if byTime != 1 || byFile != 1 {
		t.Fatalf("overlaps exp: one by time, one in file order got: %v", got)
	}

	// A bad line that is not the last is an error naming the file and line.
	bad := write("bad", "a 1 10 1000\na x 20 1010\na 3 30 1020\n")
	if _, err := fwReadFile(bad); err == nil || !strings.Contains(err.Error(), "bad line 2") {
		t.Fatalf("bad line exp: error naming the file and line 2 got: %v", err)
	}
	if _, err := fwParse(strings.NewReader("a 1 10 1000 5\nb 1 1 1\n"), "log"); err == nil || !strings.Contains(err.Error(), "end 5 before start 10") {
		t.Fatalf("end before start exp: error got: %v", err)
	}
}

// The real writer and the checker together, without a cluster: two
// writers one after the other on one directory show no overlap; two at
// once do, by time and in the file's order.
func TestOverlap_FenceWriterProcesses(t *testing.T) {
	tool := fwTool(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "records")
	start := func(id string) (*exec.Cmd, string) {
		log := filepath.Join(dir, id+".log")
		cmd := exec.Command(tool, "-id", id, "-log", log, "-interval", "10ms")
		cmd.Env = append(os.Environ(), "CLAIMD_MOUNT_PATH="+dir) // as claimd exec passes it
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, log
	}
	wait := func(log string, n int) {
		t.Helper()
		if err := nsPoll(10*time.Second, func() error {
			recs, err := fwReadFile(log)
			if err != nil || len(recs) < n {
				return fmt.Errorf("records in %s exp: %d got: %d (%v)", log, n, len(recs), err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	stop := func(cmd *exec.Cmd) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	a, la := start("a")
	wait(la, 5)
	stop(a)
	b, lb := start("b")
	wait(lb, 5)
	got, counts, err := fwCheck(data, la, lb)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 || counts["a"] < 5 || counts["b"] < 5 {
		t.Fatalf("one after the other exp: no overlap, 5+ records each got: %v %v", got, counts)
	}
	c, lc := start("c")
	wait(lc, 5)
	n, _ := fwReadFile(lb)
	wait(lb, len(n)+3)
	stop(b)
	stop(c)
	got, _, err = fwCheck(data, la, lb, lc)
	if err != nil {
		t.Fatal(err)
	}
	var byTime, inFile bool
	for _, o := range got {
		if o.Earlier == "b" && o.Later == "c" {
			byTime = byTime || !o.FileOrder
			inFile = inFile || o.FileOrder
		}
	}
	if !byTime || !inFile {
		t.Fatalf("two at once exp: b and c overlap by time and in the file got: %v", got)
	}

	// Bad flags are refused, naming the flag.
	out, err := exec.Command(tool, "-id", "x y", "-mount", dir, "-log", la).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "-id") {
		t.Fatalf("an ID with a space exp: refused naming -id got: %v %s", err, out)
	}
	out, err = exec.Command(tool, "-id", "x", "-log", la).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "CLAIMD_MOUNT_PATH") {
		t.Fatalf("no mount exp: refused naming -mount and $CLAIMD_MOUNT_PATH got: %v %s", err, out)
	}
}
