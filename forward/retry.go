package forward

import (
	"errors"

	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
)

// retryable says whether a failed forward of args may be sent again. A
// request that was certainly not applied always may (no leader, or it
// never left this server). One whose outcome is unknown may only when
// applying it twice is the same as once.
func retryable(method string, args any, err error) bool {
	if notApplied(err) {
		return true
	}
	return structs.OutcomeUnknown(err) && structs.ResendSafe(method, args)
}

// notApplied: the request certainly changed nothing.
func notApplied(err error) bool {
	return errors.Is(err, structs.ErrNoLeader) || errors.Is(err, rpc.ErrNotSent)
}
