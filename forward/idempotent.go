package forward

import (
	"errors"

	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
)

// idempotentWrites are the forwarded writes that may be sent again after an
// outcome-unknown failure (the leader's connection died after the request
// left, or the leader lost leadership or stopped while committing it),
// each with a test of the request: for those it accepts, applying the
// request twice leaves the same state and gives the caller the same answer
// as applying it once (decision 35). Every other write returns such a
// failure to its caller, because a second apply could differ from the
// first.
//
// Audited (fsm and endpoints), and why each qualifies:
//   - Volume.Register without capacities: an upsert of whole specs. Claims,
//     current modes and a known capacity are kept from the stored row
//     whatever the request carries, and the only refusal on an existing row
//     (changing plugin, external ID or modes while claimed) cannot fire for
//     the spec the first apply stored. A spec with a capacity may grow a
//     registered volume through its plugin after the entry, and a second
//     try then answers differently (nothing grown, or "shrinking is not
//     supported" when the plugin grew past the size asked for), so such a
//     request is not sent again.
//   - Node.Register: an upsert of the node; the existing node's secret must
//     match, which the same request's does.
//   - Node.UpdateStatus: sets a status; the same status again is a no-op.
//
// Deliberately not here, among others: Volume.Claim (a re-claim by the
// same alloc answers the claim it holds, but with New=false, or a refusal
// if the alloc was stopped in between; the method also carries releases;
// client agents retry their own claims), Volume.Deregister, Volume.Delete
// and Node.Deregister (the second apply answers not_found), Alloc.Place and
// Volume.Create (a second create is a conflict or a second storage object),
// ACL.Bootstrap and ACL.TokenCreate (a second token or a refusal). A
// method added to this list needs the same audit.
var idempotentWrites = map[string]func(args any) bool{
	"Volume.Register":   registersWithoutGrowing,
	"Node.Register":     always,
	"Node.UpdateStatus": always,
}

func always(any) bool { return true }

// registersWithoutGrowing: no volume in the request gives a capacity, so
// registering it again can only store the same specs (see above).
func registersWithoutGrowing(args any) bool {
	req, ok := args.(*structs.VolumeRegisterRequest)
	if !ok {
		return false
	}
	for _, v := range req.Volumes {
		if v == nil || v.Capacity != 0 {
			return false
		}
	}
	return true
}

// retryable says whether a failed forward of args may be sent again. A
// request that was certainly not applied always may (no leader, or it
// never left this server). One whose outcome is unknown may only when
// applying it twice is the same as once.
func retryable(method string, args any, err error) bool {
	if notApplied(err) {
		return true
	}
	idempotent, ok := idempotentWrites[method]
	return ok && outcomeUnknown(err) && idempotent(args)
}

// notApplied: the request certainly changed nothing.
func notApplied(err error) bool {
	return errors.Is(err, structs.ErrNoLeader) || errors.Is(err, rpc.ErrNotSent)
}

// outcomeUnknown: the request may or may not have been applied. Unavailable
// covers a connection that broke after the request left (rpc.ErrTransport
// errors are unavailable) and a leader that lost leadership while
// committing; shutting down is a leader that stopped while committing.
func outcomeUnknown(err error) bool {
	return errors.Is(err, structs.ErrUnavailable) || errors.Is(err, structs.ErrShutdown)
}
