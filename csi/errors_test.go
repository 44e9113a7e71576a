package csi

import (
	"context"
	"errors"
	"testing"

	"github.com/claimd/claimd/structs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestAlreadyDetached(t *testing.T) {
	cases := []struct {
		err        error
		node, ctrl bool
	}{
		{nil, true, true},
		{status.Error(codes.NotFound, "no such volume"), true, true},
		{status.Error(codes.Internal, "umount: /a: no mount point specified"), true, false},
		{status.Error(codes.Internal, "exit status 32: umount: /a: NOT MOUNTED"), true, false},
		{status.Error(codes.Internal, "device busy"), false, false},
		{status.Error(codes.Unavailable, "no mount point"), false, false},
		{status.Error(codes.DeadlineExceeded, "not mounted"), false, false},
		{errors.New("not mounted"), false, false}, // not from the plugin
	}
	for _, tc := range cases {
		if got := alreadyDetached(tc.err, true); got != tc.node {
			t.Errorf("node %v exp: %t got: %t", tc.err, tc.node, got)
		}
		if got := alreadyDetached(tc.err, false); got != tc.ctrl {
			t.Errorf("controller %v exp: %t got: %t", tc.err, tc.ctrl, got)
		}
	}
}

func TestErrorCodes(t *testing.T) {
	cases := map[codes.Code]*structs.CodedError{
		codes.NotFound:           structs.ErrNotFound,
		codes.InvalidArgument:    structs.ErrInvalid,
		codes.FailedPrecondition: structs.ErrConflict,
		codes.AlreadyExists:      structs.ErrConflict,
		codes.DeadlineExceeded:   structs.ErrTimeout,
		codes.Unavailable:        structs.ErrUnavailable,
		codes.Internal:           structs.ErrUnavailable,
		codes.ResourceExhausted:  structs.ErrUnavailable,
		codes.PermissionDenied:   structs.ErrPermissionDenied,
	}
	for code, want := range cases {
		err := wrapError("p", "M", status.Error(code, "msg"))
		if !errors.Is(err, want) {
			t.Errorf("%s exp: %v got: %v", code, want.Code, err)
		}
		if status.Code(err) != code {
			t.Errorf("%s exp: grpc code kept got: %s", code, status.Code(err))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ctxError(ctx, "p", "M"); !errors.Is(err, structs.ErrTimeout) {
		t.Errorf("exp: canceled context is a timeout got: %v", err)
	}
}
