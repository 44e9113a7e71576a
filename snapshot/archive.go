// Package snapshot is claimd's backup archive and the stream that carries
// it between the CLI and the servers (`claimd operator snapshot save`,
// `restore`, `inspect`).
//
// An archive is a gzip'd tar of three files, in this order:
//
//	meta.json    Meta: format version, claimd version, Raft index and term,
//	             time, the server that took it
//	state.bin    the state machine's snapshot stream (fsm.WriteSnapshot:
//	             every table, canonical bytes)
//	SHA256SUMS   "<hex>  meta.json" and "<hex>  state.bin", as sha256sum
//	             writes them (so `tar xzf` then `sha256sum -c` checks a copy)
//
// Reading verifies everything before the caller may act on the state: the
// gzip header is exactly the one claimd writes, the entries and their
// sizes, the format version, both checksums, the gzip CRC and length, and
// that nothing follows the archive. A truncated, corrupt or wrong-version
// archive is an error (ErrCorrupt, ErrVersion) that says which check
// failed. Because state.bin holds canonical bytes, its SHA-256 equals the
// state digest (Status.StateDigest) of a server holding that state.
package snapshot

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// FormatVersion is the archive format this claimd writes and reads.
const FormatVersion = 1

// Names of the archive's entries, in order.
const (
	metaName  = "meta.json"
	stateName = "state.bin"
	sumsName  = "SHA256SUMS"
)

// Size bounds, checked before anything is read into memory. The state is
// streamed, never held; the bound only refuses a header that claims an
// absurd size.
const (
	maxMetaBytes = 64 << 10
	maxSumsBytes = 4 << 10
	// MaxStateBytes bounds state.bin: 100k volumes take about 95 MB.
	MaxStateBytes = 8 << 30
)

var (
	// ErrCorrupt: the archive is truncated, modified, or not an archive.
	ErrCorrupt = errors.New("snapshot archive is corrupt")
	// ErrVersion: the archive's format is not one this claimd reads.
	ErrVersion = errors.New("snapshot archive has an unsupported format version")
)

// gzipHeader is the exact header compress/gzip writes at BestSpeed with an
// empty gzip.Header (no name, no time, OS unknown). Reading insists on it:
// gzip's CRC covers the content but not the header's time, flags and OS
// bytes, so a byte changed there would otherwise pass unnoticed.
var gzipHeader = []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 0xff}

// Meta describes an archive (meta.json).
type Meta struct {
	// Format is the archive format version (FormatVersion).
	Format int `json:"format"`
	// ClaimdVersion is the version of the server that took it.
	ClaimdVersion string `json:"claimd_version"`
	// Index is the Raft index of the last write in the state: the state is
	// the cluster's as of this index.
	Index uint64 `json:"index"`
	// Term is the Raft term of the server that took it, at the time.
	Term uint64 `json:"term"`
	// Time is when it was taken (UTC).
	Time time.Time `json:"time"`
	// Server and ServerID name the server that took it.
	Server   string `json:"server"`
	ServerID string `json:"server_id"`
}

// Info is a verified archive: its Meta and its state's size and SHA-256
// (equal to the state digest of a server holding that state).
type Info struct {
	Meta        Meta   `json:"meta"`
	StateSize   int64  `json:"state_size"`
	StateSHA256 string `json:"state_sha256"`
}

// Write writes an archive of the state read from state (exactly size
// bytes). meta.Format 0 means FormatVersion.
func Write(w io.Writer, meta Meta, state io.Reader, size int64) (*Info, error) {
	if meta.Format == 0 {
		meta.Format = FormatVersion
	}
	meta.Time = meta.Time.UTC()
	metaJSON, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("snapshot: encode meta: %w", err)
	}
	metaJSON = append(metaJSON, '\n')
	gz, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	header := func(name string, size int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o600,
			ModTime: meta.Time.Truncate(time.Second), Format: tar.FormatPAX})
	}
	if err := header(metaName, int64(len(metaJSON))); err != nil {
		return nil, fmt.Errorf("snapshot: write %s: %w", metaName, err)
	}
	if _, err := tw.Write(metaJSON); err != nil {
		return nil, fmt.Errorf("snapshot: write %s: %w", metaName, err)
	}
	if err := header(stateName, size); err != nil {
		return nil, fmt.Errorf("snapshot: write %s: %w", stateName, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tw, h), io.LimitReader(state, size))
	if err != nil {
		return nil, fmt.Errorf("snapshot: write %s: %w", stateName, err)
	}
	if n != size {
		return nil, fmt.Errorf("snapshot: write %s: the state ended after %d of %d bytes", stateName, n, size)
	}
	info := &Info{Meta: meta, StateSize: size, StateSHA256: hex.EncodeToString(h.Sum(nil))}
	metaSum := sha256.Sum256(metaJSON)
	sums := fmt.Sprintf("%x  %s\n%s  %s\n", metaSum, metaName, info.StateSHA256, stateName)
	if err := header(sumsName, int64(len(sums))); err != nil {
		return nil, fmt.Errorf("snapshot: write %s: %w", sumsName, err)
	}
	if _, err := io.WriteString(tw, sums); err != nil {
		return nil, fmt.Errorf("snapshot: write %s: %w", sumsName, err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("snapshot: finish archive: %w", err)
	}
	if err := gz.Close(); err != nil {
		return nil, fmt.Errorf("snapshot: finish archive: %w", err)
	}
	return info, nil
}

// Read reads and verifies an archive, copying the state's bytes to state
// as they come. The copy may be used only when Read returns no error (a
// corrupt archive is known as such only at its end); on an error it must
// be thrown away. Read consumes r to its end: nothing may follow the
// archive.
func Read(r io.Reader, state io.Writer) (*Info, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(len(gzipHeader))
	if err != nil {
		return nil, corrupt("%d bytes: too short to be an archive", len(head))
	}
	if !bytes.Equal(head, gzipHeader) {
		if head[0] != gzipHeader[0] || head[1] != gzipHeader[1] {
			return nil, corrupt("not a claimd snapshot archive (no gzip header)")
		}
		return nil, corrupt("the gzip header is not the one claimd writes (% x)", head)
	}
	// br is an io.ByteReader, so gzip reads from it without buffering of
	// its own: after the gzip trailer br is exactly at the archive's end.
	gz, err := gzip.NewReader(br)
	if err != nil {
		return nil, corrupt("gzip header: %v", err)
	}
	gz.Multistream(false)
	tr := tar.NewReader(gz)

	metaJSON, _, err := readEntry(tr, metaName, maxMetaBytes, nil)
	if err != nil {
		return nil, err
	}
	var meta Meta
	if err := json.Unmarshal(metaJSON, &meta); err != nil {
		return nil, corrupt("%s: %v", metaName, err)
	}
	// The format is checked before the state is read: an archive from a
	// newer claimd is refused at once, with the versions in the message.
	if meta.Format != FormatVersion {
		return nil, fmt.Errorf("%w: format %d (written by claimd %s); this claimd (%s) reads format %d",
			ErrVersion, meta.Format, orUnknown(meta.ClaimdVersion), ClaimdVersion(), FormatVersion)
	}
	h := sha256.New()
	_, size, err := readEntry(tr, stateName, MaxStateBytes, io.MultiWriter(state, h))
	if err != nil {
		return nil, err
	}
	info := &Info{Meta: meta, StateSize: size, StateSHA256: hex.EncodeToString(h.Sum(nil))}
	sums, _, err := readEntry(tr, sumsName, maxSumsBytes, nil)
	if err != nil {
		return nil, err
	}
	if _, err := tr.Next(); !errors.Is(err, io.EOF) {
		if err == nil {
			return nil, corrupt("an entry follows %s", sumsName)
		}
		return nil, corrupt("after %s: %v", sumsName, err)
	}
	// The tar end is not the gzip end: no data may follow the tar inside
	// the gzip stream, and reading to the gzip end checks its CRC and
	// length.
	if n, err := io.Copy(io.Discard, gz); err != nil {
		return nil, corrupt("gzip stream: %v", err)
	} else if n > 0 {
		return nil, corrupt("%d bytes follow the tar archive inside the gzip stream", n)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		if err == nil {
			return nil, corrupt("data follows the end of the archive")
		}
		return nil, corrupt("after the archive: %v", err)
	}
	if err := checkSums(string(sums), map[string]string{
		metaName:  fmt.Sprintf("%x", sha256.Sum256(metaJSON)),
		stateName: info.StateSHA256,
	}); err != nil {
		return nil, err
	}
	return info, nil
}

// readEntry reads the next tar entry, which must be a regular file named
// name of at most limit bytes. With to nil the content is returned; else it
// is copied to to. It returns the size.
func readEntry(tr *tar.Reader, name string, limit int64, to io.Writer) ([]byte, int64, error) {
	h, err := tr.Next()
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, 0, corrupt("truncated: %s is missing", name)
		}
		return nil, 0, corrupt("reading the entry for %s: %v", name, err)
	}
	if h.Name != name || h.Typeflag != tar.TypeReg {
		return nil, 0, corrupt("entry %q (type %q) where %s belongs", h.Name, h.Typeflag, name)
	}
	if h.Size < 0 || h.Size > limit {
		return nil, 0, corrupt("%s claims %d bytes, at most %d", name, h.Size, limit)
	}
	var buf bytes.Buffer
	if to == nil {
		to = &buf
	}
	dst := &destWriter{w: to}
	n, err := io.Copy(dst, tr)
	if err != nil {
		if dst.err != nil {
			// The archive is fine as far as it was read; the copy failed.
			return nil, n, fmt.Errorf("snapshot: copying %s: %w", name, dst.err)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, n, corrupt("truncated in %s after %d of %d bytes", name, n, h.Size)
		}
		return nil, n, corrupt("reading %s: %v", name, err)
	}
	return buf.Bytes(), n, nil
}

// checkSums compares SHA256SUMS with the checksums computed while reading.
// Every entry must be listed once, and nothing else.
func checkSums(sums string, got map[string]string) error {
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(sums, "\n"), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != sha256.Size*2 {
			return corrupt("%s: malformed line %q", sumsName, line)
		}
		if _, dup := listed[name]; dup {
			return corrupt("%s lists %s twice", sumsName, name)
		}
		listed[name] = sum
	}
	for name, sum := range got {
		want, ok := listed[name]
		if !ok {
			return corrupt("%s does not list %s", sumsName, name)
		}
		if want != sum {
			return corrupt("the SHA-256 of %s is %s, %s says %s", name, sum, sumsName, want)
		}
	}
	if len(listed) != len(got) {
		return corrupt("%s lists %d files, the archive holds %d", sumsName, len(listed), len(got))
	}
	return nil
}

// destWriter remembers its own write error, to tell a failed copy from a
// corrupt archive.
type destWriter struct {
	w   io.Writer
	err error
}

func (d *destWriter) Write(p []byte) (int, error) {
	n, err := d.w.Write(p)
	if err != nil {
		d.err = err
	}
	return n, err
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
