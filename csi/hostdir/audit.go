package hostdir

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// AuditEntry is one line of the audit log: one finished CSI call.
type AuditEntry struct {
	// Time is when the call finished (RFC3339Nano in the file).
	Time   time.Time `json:"time"`
	Method string    `json:"method"`
	// Volume is the request's volume ID; for CreateVolume the ID made, and
	// for CreateSnapshot the source volume.
	Volume string `json:"volume"`
	// Snapshot is the snapshot ID a snapshot call named or made, and the
	// snapshot a volume was created from.
	Snapshot string `json:"snapshot,omitempty"`
	// Node is the request's node ID for controller calls and this plugin's
	// node ID for node calls.
	Node string `json:"node"`
	// Target is the publish target path, or the staging path for stage
	// and unstage.
	Target string `json:"target"`
	// Result is "ok" or the error text.
	Result string `json:"result"`
}

// auditLog appends entries to a file. Each entry is one write(2) of a whole
// line on an O_APPEND file: no buffering, so a reader (or a crash) never
// sees half of the order, and several plugin processes may share one file.
// It does not fsync; a test that reads the log outlives the plugin's
// writes, and fsync per call would slow every CSI call.
type auditLog struct {
	mu sync.Mutex
	f  *os.File
}

func openAudit(path string) (*auditLog, error) {
	if path == "" {
		return &auditLog{}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("hostdir: open audit log: %w", err)
	}
	return &auditLog{f: f}, nil
}

func (a *auditLog) write(e AuditEntry) error {
	buf, err := json.Marshal(e)
	if err != nil {
		return err
	}
	buf = append(buf, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	_, err = a.f.Write(buf)
	return err
}

func (a *auditLog) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}

// ReadAudit reads an audit log in file order, which is the order in which
// the calls finished. A missing file is an empty log.
func ReadAudit(path string) ([]AuditEntry, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var e AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return out, fmt.Errorf("audit log %s line %d: %w", path, n, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}
