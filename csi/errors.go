package csi

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/claimd/claimd/structs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is a failed call to a CSI plugin. It keeps the plugin's gRPC code for
// callers that need the detail, and maps it to a claimd error code so that
// errors.Is(err, structs.ErrUnavailable) and friends work. Error() starts
// with that code, so structs.ParseError restores it after net/rpc hops.
type Error struct {
	Plugin  string     // plugin ID from ClientOptions, may be empty
	Method  string     // CSI RPC name, e.g. "NodeStageVolume"
	Code    codes.Code // gRPC code returned by the plugin (or the transport)
	Message string     // the plugin's message
	err     error
}

func (e *Error) Error() string {
	who := "csi " + e.Method
	if e.Plugin != "" {
		who = "csi plugin " + e.Plugin + " " + e.Method
	}
	return fmt.Sprintf("%s: %s: %s (grpc %s)", e.ClaimdCode(), who, e.Message, e.Code)
}

// Unwrap gives access to the gRPC status error (status.FromError works on
// an *Error).
func (e *Error) Unwrap() error { return e.err }

// Is matches claimd's coded sentinels by code.
func (e *Error) Is(target error) bool {
	var ce *structs.CodedError
	if errors.As(target, &ce) {
		return ce.Code == e.ClaimdCode()
	}
	return false
}

// ClaimdCode maps the gRPC code to a claimd code. Retryable is the default:
// plugins report transient trouble with many different codes (Internal for a
// failed mount, Aborted for an operation in flight), and the release worker
// backs off anyway. Only codes that say the request itself is wrong map to
// codes a caller treats as permanent.
func (e *Error) ClaimdCode() structs.ErrorCode {
	switch e.Code {
	case codes.NotFound:
		return structs.CodeNotFound
	case codes.InvalidArgument, codes.OutOfRange, codes.Unimplemented:
		return structs.CodeInvalid
	case codes.FailedPrecondition, codes.AlreadyExists:
		return structs.CodeConflict
	case codes.PermissionDenied, codes.Unauthenticated:
		return structs.CodePermissionDenied
	case codes.DeadlineExceeded, codes.Canceled:
		return structs.CodeTimeout
	default:
		return structs.CodeUnavailable
	}
}

// wrapError turns an error from a gRPC call into an *Error (nil stays nil).
func wrapError(plugin, method string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		// Errors that are not gRPC statuses come from our own side of the
		// call: a context that ended before the call started, mostly.
		st = status.FromContextError(err)
	}
	return &Error{Plugin: plugin, Method: method, Code: st.Code(), Message: st.Message(), err: err}
}

// alreadyDetached is the one place that decides whether a failed detach call
// means there was nothing left to detach, which counts as success (seed 6
// in docs/architecture.md). For node calls (NodeUnpublishVolume,
// NodeUnstageVolume) that is NotFound or a message saying the path is not
// mounted, as plugins pass
// through umount(8)'s "not mounted" / "no mount point specified". For
// ControllerUnpublishVolume only NotFound counts: a volume or node the
// controller does not know is, by the CSI spec, already unpublished.
//
// Transport failures never count, whatever their text: an unreachable
// plugin has detached nothing.
func alreadyDetached(err error, nodeCall bool) bool {
	if err == nil {
		return true
	}
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.NotFound:
		return true
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	if !nodeCall {
		return false
	}
	msg := strings.ToLower(st.Message())
	return strings.Contains(msg, "not mounted") || strings.Contains(msg, "no mount point")
}

// ctxError reports a context that has already ended as a *Error, so callers
// see the same error type whether the deadline passed before or during a
// call.
func ctxError(ctx context.Context, plugin, method string) error {
	if err := ctx.Err(); err != nil {
		return wrapError(plugin, method, err)
	}
	return nil
}
