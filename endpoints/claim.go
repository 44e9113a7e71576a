package endpoints

import (
	"github.com/claimd/claimd/structs"
)

// Claim claims a volume for an allocation, or releases the allocation's
// claim (Release: true): one RPC for both (seed 3). At the leader, claims
// that arrive together are committed as one claim batch entry.
func (v *Volume) Claim(args *structs.VolumeClaimRequest, reply *structs.VolumeClaimResponse) error {
	if done, err := v.srv.Forward("Volume.Claim", args, args, reply); done {
		return err
	}
	if err := args.Validate(); err != nil {
		return err
	}
	res, index, err := v.srv.SubmitClaim(args)
	if err != nil {
		return err
	}
	reply.Index = index
	if err := res.Err(); err != nil {
		return err
	}
	reply.Claim = res.Claim
	reply.New = res.New
	return nil
}
