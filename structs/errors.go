package structs

import (
	"errors"
	"fmt"
	"net/rpc"
	"strings"
)

// ErrorCode is a stable, machine-readable error kind. net/rpc flattens errors
// to strings on the wire, so every error that a caller may want to test with
// errors.Is carries one of these codes as the prefix of its message
// ("code: message"). ParseError turns such a string back into a *CodedError
// on the caller side, after any number of forwarding hops.
type ErrorCode string

const (
	CodeNoLeader         ErrorCode = "no_leader"
	CodeNotFound         ErrorCode = "not_found"
	CodeInvalid          ErrorCode = "invalid"
	CodeMaxClaims        ErrorCode = "max_claims"
	CodePermissionDenied ErrorCode = "permission_denied"
	CodeUnavailable      ErrorCode = "unavailable"
	CodeConflict         ErrorCode = "conflict"
	CodeUnschedulable    ErrorCode = "unschedulable"
	CodeTooLarge         ErrorCode = "too_large"
	CodeShutdown         ErrorCode = "shutdown"
	CodeTimeout          ErrorCode = "timeout"
)

var knownCodes = map[ErrorCode]bool{
	CodeNoLeader: true, CodeNotFound: true, CodeInvalid: true, CodeMaxClaims: true,
	CodePermissionDenied: true, CodeUnavailable: true, CodeConflict: true,
	CodeUnschedulable: true, CodeTooLarge: true, CodeShutdown: true, CodeTimeout: true,
}

// Sentinels for errors.Is. Compare by code only: the message may differ.
var (
	ErrNoLeader         = &CodedError{Code: CodeNoLeader, Message: "no cluster leader"}
	ErrNotFound         = &CodedError{Code: CodeNotFound, Message: "not found"}
	ErrInvalid          = &CodedError{Code: CodeInvalid, Message: "invalid request"}
	ErrMaxClaims        = &CodedError{Code: CodeMaxClaims, Message: "volume has the maximum number of claims"}
	ErrPermissionDenied = &CodedError{Code: CodePermissionDenied, Message: "permission denied"}
	ErrUnavailable      = &CodedError{Code: CodeUnavailable, Message: "unavailable"}
	ErrConflict         = &CodedError{Code: CodeConflict, Message: "conflict"}
	ErrUnschedulable    = &CodedError{Code: CodeUnschedulable, Message: "unschedulable"}
	ErrTooLarge         = &CodedError{Code: CodeTooLarge, Message: "request too large"}
	ErrShutdown         = &CodedError{Code: CodeShutdown, Message: "server shutting down"}
	ErrTimeout          = &CodedError{Code: CodeTimeout, Message: "timed out"}
)

// CodedError is an error with a stable code that survives RPC hops.
type CodedError struct {
	Code    ErrorCode
	Message string
}

func (e *CodedError) Error() string { return string(e.Code) + ": " + e.Message }

// Is makes errors.Is(err, ErrNotFound) true for any not_found error.
func (e *CodedError) Is(target error) bool {
	var t *CodedError
	if errors.As(target, &t) {
		return t.Code == e.Code
	}
	return false
}

// NewError builds a coded error with a message.
func NewError(code ErrorCode, msg string) *CodedError {
	return &CodedError{Code: code, Message: msg}
}

// Invalid reports a bad field: the message names the field and the problem.
func Invalid(field, problem string) *CodedError {
	return &CodedError{Code: CodeInvalid, Message: field + ": " + problem}
}

// NotFound reports a missing object of a kind ("volume", "node") by ID.
func NotFound(kind, id string) *CodedError {
	return &CodedError{Code: CodeNotFound, Message: kind + " " + quote(id) + " not found"}
}

func quote(s string) string { return "\"" + s + "\"" }

// ParseError restores a coded error from an error that crossed net/rpc (an
// rpc.ServerError string). Errors without a known code prefix are returned
// unchanged; nil stays nil.
func ParseError(err error) error {
	if err == nil {
		return nil
	}
	var ce *CodedError
	if errors.As(err, &ce) {
		return err
	}
	var se rpc.ServerError
	if !errors.As(err, &se) {
		return err
	}
	s := string(se)
	code, msg, ok := strings.Cut(s, ": ")
	if !ok || !knownCodes[ErrorCode(code)] {
		return err
	}
	return &CodedError{Code: ErrorCode(code), Message: msg}
}

// IsRetryable reports whether a caller may retry the same request later with
// a chance of success (the request itself was not wrong).
func IsRetryable(err error) bool {
	return errors.Is(err, ErrNoLeader) || errors.Is(err, ErrMaxClaims) ||
		errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTimeout)
}

// TopologyRefusal starts the message of an unschedulable claim refusal
// made because the node is outside the volume's accessible topology. Other
// unschedulable refusals (node down, plugin unhealthy) pass when the
// cluster heals, so the client agent retries them; this one cannot pass
// while the volume and the node stay as they are, so it must not. It is a
// marker in the message rather than a new code so that the refusal still
// is unschedulable (errors.Is) to every caller that knows only the codes,
// and it survives RPC hops and Wrap, which keep the message.
const TopologyRefusal = "topology mismatch: "

// IsTopologyRefusal reports whether err is an unschedulable refusal
// because of topology (see TopologyRefusal).
func IsTopologyRefusal(err error) bool {
	err = ParseError(err)
	return errors.Is(err, ErrUnschedulable) && strings.Contains(err.Error(), TopologyRefusal)
}

// NodeNotYetKnown marks an unavailable answer from a follower that has
// not applied a node's registration yet: a stale read right after the
// node registered, which passes by itself. A marker, like TopologyRefusal,
// so that the answer stays unavailable (retried) for every caller.
const NodeNotYetKnown = "this server does not know node "

// NodeNotYetKnownError is that answer for method and nodeID.
func NodeNotYetKnownError(method, nodeID string) error {
	return NewError(CodeUnavailable, fmt.Sprintf("%s: %s%q yet; retry", method, NodeNotYetKnown, nodeID))
}

// IsNodeNotYetKnown reports whether err is that answer (see
// NodeNotYetKnown).
func IsNodeNotYetKnown(err error) bool {
	err = ParseError(err)
	return errors.Is(err, ErrUnavailable) && strings.Contains(err.Error(), NodeNotYetKnown)
}

// Wrap adds context to an error and keeps its code, so that errors.Is
// still works after the error crosses the wire (where %w chains are lost
// and only the "code: " prefix survives).
func Wrap(err error, context string) error {
	if err == nil {
		return nil
	}
	var ce *CodedError
	if errors.As(err, &ce) {
		return &CodedError{Code: ce.Code, Message: context + ": " + stripCode(err.Error(), ce.Code)}
	}
	var coder interface{ ClaimdCode() ErrorCode }
	if errors.As(err, &coder) {
		return &CodedError{Code: coder.ClaimdCode(), Message: context + ": " + stripCode(err.Error(), coder.ClaimdCode())}
	}
	return fmt.Errorf("%s: %w", context, err)
}

// stripCode drops a leading "code: " so wrapping never repeats the code.
func stripCode(msg string, code ErrorCode) string {
	return strings.TrimPrefix(msg, string(code)+": ")
}

// CodeOf returns the code of err for metric labels: "" for nil, the code
// of a coded error (also one that crossed net/rpc, see ParseError), and
// "error" for an error without a code.
func CodeOf(err error) string {
	if err == nil {
		return ""
	}
	var ce *CodedError
	if errors.As(ParseError(err), &ce) {
		return string(ce.Code)
	}
	var coder interface{ ClaimdCode() ErrorCode }
	if errors.As(err, &coder) {
		return string(coder.ClaimdCode())
	}
	return "error"
}
