package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The overlap checker of the fencing nemeses (issue 39): a single-writer
// volume has at most one writer at a time, so once a second writer has
// written, the first one must never write again. The records are the
// fencewriter's (integration/testdata/fencewriter): each write stamped
// with CLOCK_BOOTTIME before it and, in the writer's own log, after its
// fsync returned. Every writer of one volume runs on one kernel (the
// network-namespace lab), so the stamps of two writers compare directly.
//
// Two views, because each misses something the other sees:
//
//   - Time (fwOverlaps): a writer whose last write ended after another's
//     first write began wrote while the other did. This also sees writes
//     that did not land in the volume file (a writer killed between its
//     write and the log line leaves the volume line only; one writing to
//     a file that is no longer the volume's leaves the log line only).
//   - File order (fwFileOrder): O_APPEND puts each record after every
//     earlier one, so in the volume file, a record of the first writer
//     after the second writer's first record is a write that landed
//     after the handover, whatever its stamp says (a writer frozen between
//     stamping a record and writing it stamps it early).

// fwRecord is one record of one writer.
type fwRecord struct {
	Writer string
	Seq    int64
	// Start is CLOCK_BOOTTIME (ns) just before the write; End just after
	// its fsync returned (Start when only the volume's copy is known).
	Start, End int64
	// Wall is the wall clock at Start (ns since the epoch), to line the
	// record up with logs.
	Wall int64
}

// fwOverlap is one violation: Later wrote while, or before, Earlier was
// still writing.
type fwOverlap struct {
	Earlier, Later string
	// From is Later's first write, Until Earlier's last write that ended
	// after it (CLOCK_BOOTTIME ns); for a file-order violation they are the
	// stamps of those two records.
	From, Until int64
	// Records is how many of Earlier's records came after From.
	Records int
	// FileOrder: found in the volume file's order (fwFileOrder).
	FileOrder bool
}

func (o fwOverlap) String() string {
	how := "by time"
	if o.FileOrder {
		how = "in the volume file"
	}
	return fmt.Sprintf("%s wrote %d record(s) after %s's first write (%s): two writers for %s",
		o.Earlier, o.Records, o.Later, how, time.Duration(o.Until-o.From).Round(time.Millisecond))
}

// fwParse reads records, one a line: 4 fields (the volume file) or 5 (a
// writer's log). A line cut short by a killed writer (only the last line
// of a file can be) is skipped; any other line that does not parse is an
// error naming it.
func fwParse(r io.Reader, source string) ([]fwRecord, error) {
	var lines []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	var out []fwRecord
	for i, line := range lines {
		rec, err := fwParseLine(line)
		if err != nil {
			if i == len(lines)-1 {
				break // the writer was killed while writing it
			}
			return nil, fmt.Errorf("%s line %d: %w (%q)", source, i+1, err, line)
		}
		out = append(out, rec)
	}
	return out, nil
}

func fwParseLine(line string) (fwRecord, error) {
	f := strings.Fields(line)
	if len(f) != 4 && len(f) != 5 {
		return fwRecord{}, fmt.Errorf("fields exp: 4 or 5 got: %d", len(f))
	}
	var n [4]int64
	for i, s := range f[1:] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fwRecord{}, fmt.Errorf("field %d: %w", i+2, err)
		}
		n[i] = v
	}
	rec := fwRecord{Writer: f[0], Seq: n[0], Start: n[1], Wall: n[2], End: n[1]}
	if len(f) == 5 {
		if n[3] < n[1] {
			return fwRecord{}, fmt.Errorf("end %d before start %d", n[3], n[1])
		}
		rec.End = n[3]
	}
	return rec, nil
}

// fwReadFile parses a record file; a file that does not exist has none.
func fwReadFile(path string) ([]fwRecord, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return fwParse(f, path)
}

// fwMerge joins records from several sources, one per writer and sequence
// number: a writer's log line (which knows when the write ended) wins over
// the volume's copy of it. The result is sorted by Start.
func fwMerge(sources ...[]fwRecord) []fwRecord {
	type key struct {
		w string
		s int64
	}
	by := map[key]fwRecord{}
	for _, src := range sources {
		for _, r := range src {
			k := key{r.Writer, r.Seq}
			if old, ok := by[k]; !ok || r.End > old.End {
				by[k] = r
			}
		}
	}
	out := make([]fwRecord, 0, len(by))
	for _, r := range by {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b fwRecord) int {
		if a.Start != b.Start {
			return cmpInt64(a.Start, b.Start)
		}
		return strings.Compare(a.Writer, b.Writer)
	})
	return out
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// fwOverlaps finds, by time, every pair of writers where the one that
// began first still wrote after the other began: some record of it ended
// after the other's first record started.
func fwOverlaps(recs []fwRecord) []fwOverlap {
	first := map[string]int64{}
	var order []string
	for _, r := range recs {
		if f, ok := first[r.Writer]; !ok || r.Start < f {
			if !ok {
				order = append(order, r.Writer)
			}
			first[r.Writer] = r.Start
		}
	}
	slices.SortFunc(order, func(a, b string) int { return cmpInt64(first[a], first[b]) })
	var out []fwOverlap
	for i, earlier := range order {
		for _, later := range order[i+1:] {
			o := fwOverlap{Earlier: earlier, Later: later, From: first[later]}
			for _, r := range recs {
				if r.Writer == earlier && r.End > o.From {
					o.Records++
					o.Until = max(o.Until, r.End)
				}
			}
			if o.Records > 0 {
				out = append(out, o)
			}
		}
	}
	return out
}

// fwFileOrder finds, in the order records landed in one file, every pair
// of writers where the one whose record came first has a record after the
// other's first.
func fwFileOrder(recs []fwRecord) []fwOverlap {
	firstAt := map[string]int{}
	var order []string
	for i, r := range recs {
		if _, ok := firstAt[r.Writer]; !ok {
			firstAt[r.Writer] = i
			order = append(order, r.Writer)
		}
	}
	var out []fwOverlap
	for i, earlier := range order {
		for _, later := range order[i+1:] {
			from := firstAt[later]
			o := fwOverlap{Earlier: earlier, Later: later, From: recs[from].Start, FileOrder: true}
			for _, r := range recs[from+1:] {
				if r.Writer == earlier {
					o.Records++
					o.Until = max(o.Until, r.Start)
				}
			}
			if o.Records > 0 {
				out = append(out, o)
			}
		}
	}
	return out
}

// fwCheck reads one volume's file and its writers' logs and returns every
// overlap either view finds, with how many records each writer has.
func fwCheck(volumeFile string, logs ...string) ([]fwOverlap, map[string]int, error) {
	inFile, err := fwReadFile(volumeFile)
	if err != nil {
		return nil, nil, err
	}
	sources := [][]fwRecord{inFile}
	for _, l := range logs {
		recs, err := fwReadFile(l)
		if err != nil {
			return nil, nil, err
		}
		sources = append(sources, recs)
	}
	all := fwMerge(sources...)
	counts := map[string]int{}
	for _, r := range all {
		counts[r.Writer]++
	}
	return append(fwOverlaps(all), fwFileOrder(inFile)...), counts, nil
}

// fwNow reads CLOCK_BOOTTIME (ns), the clock of the records.
func fwNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}
