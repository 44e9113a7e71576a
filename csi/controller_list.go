package csi

import (
	"context"
	"fmt"

	"github.com/claimd/claimd/structs"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// maxListPages bounds one listing: a plugin that keeps answering with a
// next token must not hold a reconciliation forever.
const maxListPages = 1000

// ListVolumes lists every volume of the plugin, following next tokens. A
// plugin that answers ABORTED (its list changed under a token) is asked
// from the start again by the caller's next round.
func (c *Client) ListVolumes(ctx context.Context) ([]*structs.StorageVolume, error) {
	var out []*structs.StorageVolume
	token := ""
	for page := 0; ; page++ {
		if page == maxListPages {
			return nil, structs.NewError(structs.CodeUnavailable, fmt.Sprintf("ListVolumes: more than %d pages", maxListPages))
		}
		resp, err := invoke(ctx, c, "ListVolumes", &csipb.ListVolumesRequest{MaxEntries: 500, StartingToken: token}, c.controller.ListVolumes)
		if err != nil {
			return nil, err
		}
		for _, e := range resp.GetEntries() {
			v := e.GetVolume()
			if v.GetVolumeId() == "" {
				continue
			}
			lv := &structs.StorageVolume{ExternalID: v.GetVolumeId(), Capacity: v.GetCapacityBytes()}
			if st := e.GetStatus(); st != nil {
				lv.PublishedNodes = st.GetPublishedNodeIds()
			}
			out = append(out, lv)
		}
		token = resp.GetNextToken()
		if token == "" {
			return out, nil
		}
	}
}

// ControllerGetVolume asks the storage about one volume.
func (c *Client) ControllerGetVolume(ctx context.Context, externalID string) (*structs.StorageVolume, error) {
	resp, err := invoke(ctx, c, "ControllerGetVolume", &csipb.ControllerGetVolumeRequest{VolumeId: externalID}, c.controller.ControllerGetVolume)
	if err != nil {
		return nil, err
	}
	v := resp.GetVolume()
	lv := &structs.StorageVolume{ExternalID: v.GetVolumeId(), Capacity: v.GetCapacityBytes()}
	if lv.ExternalID == "" {
		lv.ExternalID = externalID
	}
	if st := resp.GetStatus(); st != nil {
		lv.PublishedNodes = st.GetPublishedNodeIds()
	}
	return lv, nil
}

// ListVolumeHealth returns the adverse conditions of every volume that
// has any, by external ID, as "TYPE: reason" (ControllerListVolumeHealth,
// all pages).
func (c *Client) ListVolumeHealth(ctx context.Context) (map[string][]string, error) {
	out := map[string][]string{}
	token := ""
	for page := 0; ; page++ {
		if page == maxListPages {
			return nil, structs.NewError(structs.CodeUnavailable, fmt.Sprintf("ControllerListVolumeHealth: more than %d pages", maxListPages))
		}
		resp, err := invoke(ctx, c, "ControllerListVolumeHealth", &csipb.ControllerListVolumeHealthRequest{MaxEntries: 500, StartingToken: token}, c.controller.ControllerListVolumeHealth)
		if err != nil {
			return nil, err
		}
		for _, vh := range resp.GetEntries() {
			if s := healthText(vh); len(s) > 0 {
				out[vh.GetVolumeId()] = s
			}
		}
		token = resp.GetNextToken()
		if token == "" {
			return out, nil
		}
	}
}

// ControllerGetVolumeHealth returns one volume's adverse conditions.
func (c *Client) ControllerGetVolumeHealth(ctx context.Context, externalID string) ([]string, error) {
	resp, err := invoke(ctx, c, "ControllerGetVolumeHealth", &csipb.ControllerGetVolumeHealthRequest{VolumeId: externalID}, c.controller.ControllerGetVolumeHealth)
	if err != nil {
		return nil, err
	}
	return healthText(resp.GetVolumeHealth()), nil
}

// healthText renders a volume's conditions; unknown types are kept by
// their number (the spec asks COs to ignore what they do not know, and to
// show it).
func healthText(vh *csipb.VolumeHealth) []string {
	var out []string
	for _, e := range vh.GetHealthStatuses() {
		if e.GetStatus() == csipb.VolumeHealthErrorType_UNKNOWN_VOLUME_HEALTH_TYPE && e.GetReason() == "" {
			continue
		}
		out = append(out, e.GetStatus().String()+": "+e.GetReason())
	}
	return out
}
