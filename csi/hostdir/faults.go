package hostdir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Control is the content of the control file, which the plugin reads on
// every call:
//
//	{"fail":{"NodeUnpublishVolume":2},"delay":{"NodeStageVolume":"500ms"},"exit":false}
//
// Fail arms failures: each time the file's content changes, the next N
// calls of each named method fail (with Unavailable unless FailCode names
// another code, with FailMessage's text if given). Counts armed by an
// earlier content are dropped when the content changes; to fail a method
// again with the same count, change anything else (a "seq" field, say).
// Because arming follows content, a plugin restarted with the same file
// arms its counts again.
//
// Delay applies to every call of a method while the file says so; it
// overrides -delay for the methods it names.
//
// DelayAfter holds a method's answer back after the call did its work
// (a CreateVolume that made the volume, say), as a reply lost on its way
// would: tests use it to stop the caller between the plugin's action and
// the caller's record of it.
//
// Exit makes the next call, and every call while it stays true, end the
// plugin: Main exits the process with code ExitCodeControl, an in-process
// plugin stops serving. Clear it before starting the plugin again.
//
// Write the file with WriteControl (or any write-then-rename): a half
// written file does not parse and is ignored until it does.
type Control struct {
	Fail        map[string]int    `json:"fail,omitempty"`
	FailCode    map[string]string `json:"fail_code,omitempty"`
	FailMessage map[string]string `json:"fail_message,omitempty"`
	Delay       map[string]string `json:"delay,omitempty"`
	DelayAfter  map[string]string `json:"delay_after,omitempty"`
	Exit        bool              `json:"exit,omitempty"`
	Seq         int               `json:"seq,omitempty"`
}

// WriteControl replaces the control file atomically.
func WriteControl(path string, c Control) error {
	buf, err := json.Marshal(c)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".control-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(buf)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// ExitCodeControl is the exit status of a plugin process ended by the
// control file, so a test can tell it from a crash.
const ExitCodeControl = 3

// action is what fault injection wants done to one call.
type action struct {
	delay      time.Duration
	delayAfter time.Duration
	fail       error
	exit       bool
}

type injectedFailure struct {
	code    codes.Code
	message string
}

// faults holds the armed failures and delays. It is safe for concurrent
// use; the control file is read under its lock so two calls never arm the
// same content twice.
type faults struct {
	mu     sync.Mutex
	logger hclog.Logger

	flagFail  map[string]int // from Config.Fail, consumed
	flagDelay map[string]time.Duration

	ctrlPath  string
	ctrlRaw   []byte // content last seen
	ctrlSeen  bool
	ctrlFail  map[string]int // armed from the control file, consumed
	ctrlErr   map[string]injectedFailure
	ctrlDelay map[string]time.Duration
	ctrlAfter map[string]time.Duration
	ctrlExit  bool
}

func newFaults(cfg Config) *faults {
	f := &faults{
		logger:    cfg.Logger,
		flagFail:  make(map[string]int),
		flagDelay: make(map[string]time.Duration),
		ctrlPath:  cfg.ControlFile,
	}
	for m, n := range cfg.Fail {
		f.flagFail[m] = n
	}
	for m, d := range cfg.Delay {
		f.flagDelay[m] = d
	}
	return f
}

// next decides the fate of one call of method, consuming an armed failure.
func (f *faults) next(method string) action {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reloadLocked()

	var a action
	a.exit = f.ctrlExit
	if d, ok := f.ctrlDelay[method]; ok {
		a.delay = d
	} else {
		a.delay = f.flagDelay[method]
	}
	a.delayAfter = f.ctrlAfter[method]
	switch {
	case f.ctrlFail[method] > 0:
		f.ctrlFail[method]--
		inj := f.ctrlErr[method]
		if inj.message == "" {
			// No count in the text: a message that changes with every
			// call would look like a new condition to anyone comparing.
			inj.message = fmt.Sprintf("hostdir: injected failure of %s (control file)", method)
		}
		a.fail = status.Error(inj.code, inj.message)
	case f.flagFail[method] > 0:
		f.flagFail[method]--
		a.fail = status.Errorf(codes.Unavailable, "hostdir: injected failure of %s (-fail)", method)
	}
	return a
}

// reloadLocked re-reads the control file and re-arms when its content
// changed. A file that does not parse leaves the previous state in place.
func (f *faults) reloadLocked() {
	if f.ctrlPath == "" {
		return
	}
	raw, err := os.ReadFile(f.ctrlPath)
	if err != nil && !os.IsNotExist(err) {
		f.logger.Warn("cannot read control file", "path", f.ctrlPath, "error", err)
		return
	}
	if f.ctrlSeen && bytes.Equal(raw, f.ctrlRaw) {
		return
	}
	f.ctrlSeen, f.ctrlRaw = true, raw

	var c Control
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &c); err != nil {
			f.logger.Warn("control file does not parse, keeping previous faults", "path", f.ctrlPath, "error", err)
			return
		}
	}
	fail := make(map[string]int)
	errs := make(map[string]injectedFailure)
	for m, n := range c.Fail {
		if !knownMethod(m) {
			f.logger.Warn("control file names an unknown CSI method", "method", m)
		}
		inj := injectedFailure{code: codes.Unavailable, message: c.FailMessage[m]}
		if name, ok := c.FailCode[m]; ok {
			code, ok := parseCode(name)
			if !ok {
				f.logger.Warn("control file names an unknown gRPC code, using Unavailable", "method", m, "code", name)
			}
			inj.code = code
		}
		fail[m], errs[m] = n, inj
	}
	f.ctrlFail, f.ctrlErr, f.ctrlExit = fail, errs, c.Exit
	f.ctrlDelay, f.ctrlAfter = f.parseDelays("delay", c.Delay), f.parseDelays("delay_after", c.DelayAfter)
	f.logger.Info("control file applied", "fail", c.Fail, "delay", c.Delay, "delay_after", c.DelayAfter, "exit", c.Exit)
}

// parseDelays reads a control file's method -> duration map; an entry that
// does not parse is skipped with a warning.
func (f *faults) parseDelays(field string, in map[string]string) map[string]time.Duration {
	out := make(map[string]time.Duration, len(in))
	for m, s := range in {
		d, err := time.ParseDuration(s)
		if err != nil {
			f.logger.Warn("control file "+field+" does not parse", "method", m, "delay", s, "error", err)
			continue
		}
		out[m] = d
	}
	return out
}

// parseCode reads a gRPC code name as "Internal", "INTERNAL" or
// "internal"; unknown names give Unavailable and false.
func parseCode(name string) (codes.Code, bool) {
	norm := strings.ToLower(strings.ReplaceAll(name, "_", ""))
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if strings.ToLower(c.String()) == norm {
			return c, true
		}
	}
	return codes.Unavailable, false
}
