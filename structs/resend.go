package structs

import "errors"

// idempotentWrites are the writes that may be sent again after an
// outcome-unknown failure (the server's connection died after the request
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
//   - Alloc.Place: an alloc already placed on the same node with the same
//     volume requests is skipped as a retried placement (fsm
//     applyAllocPlace); one placed differently is a conflict either time.
//     (An alloc stopped, finished and garbage-collected between the two
//     tries would be placed again; collection waits far longer than a
//     retry does.)
//
// Deliberately not here, among others: Volume.Claim (a re-claim by the
// same alloc answers the claim it holds, but with New=false, or a refusal
// if the alloc was stopped in between; the method also carries releases;
// client agents retry their own claims), Volume.Deregister, Volume.Delete
// and Node.Deregister (the second apply answers not_found), Volume.Create (a
// second create is a conflict or a second storage object),
// ACL.Bootstrap and ACL.TokenCreate (a second token or a refusal). A
// method added to this list needs the same audit.
var idempotentWrites = map[string]func(args any) bool{
	"Volume.Register":   registersWithoutGrowing,
	"Node.Register":     always,
	"Node.UpdateStatus": always,
	"Alloc.Place":       always,
}

func always(any) bool { return true }

// registersWithoutGrowing: no volume in the request gives a capacity, so
// registering it again can only store the same specs (see above).
func registersWithoutGrowing(args any) bool {
	req, ok := args.(*VolumeRegisterRequest)
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

// ResendSafe reports whether method with args may be sent again after a
// failure whose outcome is unknown (OutcomeUnknown): applying it twice is
// the same as applying it once. Used by the servers' forwarder and the Go
// client.
func ResendSafe(method string, args any) bool {
	idempotent, ok := idempotentWrites[method]
	return ok && idempotent(args)
}

// OutcomeUnknown reports whether a failed write may or may not have been
// applied. Unavailable covers a connection that broke after the request
// left (transport errors are unavailable) and a leader that lost
// leadership while committing; shutting down is a leader that stopped
// while committing.
func OutcomeUnknown(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrShutdown)
}
