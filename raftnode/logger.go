package raftnode

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
)

// plainArgs is a logger for the Raft library that renders its values as
// text: Raft logs structs ("follower", "node" and "peer" values) that a
// JSON logger would otherwise write as {} (issue 30), and the text form is
// what the line-format logger already shows.
type plainArgs struct{ hclog.Logger }

func newPlainArgs(l hclog.Logger) hclog.Logger { return plainArgs{l} }

// plain turns every value that is not a scalar JSON renders well into its
// fmt form (its String method where it has one).
func plain(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if i%2 == 0 { // keys
			out[i] = a
			continue
		}
		switch v := a.(type) {
		case nil, string, bool, int, int32, int64, uint, uint32, uint64, float32, float64, time.Duration, time.Time:
			out[i] = v
		case error:
			out[i] = v.Error()
		case hclog.Format:
			// hclog.Fmt("%0.2f%%", pct): the format applied, as hclog
			// itself would (fmt.Sprint printed "[%0.2f%% 100]").
			out[i] = formatted(v)
		default:
			out[i] = fmt.Sprint(v)
		}
	}
	return out
}

func (p plainArgs) Log(level hclog.Level, msg string, args ...any) {
	p.Logger.Log(level, msg, plain(args)...)
}
func (p plainArgs) Trace(msg string, args ...any) { p.Logger.Trace(msg, plain(args)...) }
func (p plainArgs) Debug(msg string, args ...any) { p.Logger.Debug(msg, plain(args)...) }
func (p plainArgs) Info(msg string, args ...any)  { p.Logger.Info(msg, plain(args)...) }
func (p plainArgs) Warn(msg string, args ...any)  { p.Logger.Warn(msg, plain(args)...) }
func (p plainArgs) Error(msg string, args ...any) { p.Logger.Error(msg, plain(args)...) }
func (p plainArgs) With(args ...any) hclog.Logger { return plainArgs{p.Logger.With(plain(args)...)} }
func (p plainArgs) Named(name string) hclog.Logger {
	return plainArgs{p.Logger.Named(name)}
}
func (p plainArgs) ResetNamed(name string) hclog.Logger {
	return plainArgs{p.Logger.ResetNamed(name)}
}

// formatted applies an hclog.Format's format string to its arguments.
func formatted(f hclog.Format) string {
	if len(f) == 0 {
		return ""
	}
	format, ok := f[0].(string)
	if !ok {
		return fmt.Sprint([]any(f)...)
	}
	return fmt.Sprintf(format, f[1:]...)
}
