package structs

import (
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// A hand-written msgpack codec for VolumeClaimRequest, the hottest type on
// the wire and in the log: every claim and release call carries one (and a
// follower forwards it), and every claim batch entry carries up to 256,
// decoded on every server. go-msgpack's reflection walks the struct per
// field on each of them (about 1.8 µs per request decoded inside a batch).
// The bytes are those reflection writes: a map of every field (there are no
// omitempty tags) by Go field name, sorted by name, the embedded
// WriteRequest's fields inline, so logs and peers of either kind read each
// other (TestVolumeClaimRequestCodec_* checks both directions). A new field
// must be added to both functions below and to claimReqFields (Wait, with
// omitempty, is written only when set, as reflection does); the
// test fails until it is.

// go-msgpack's unexported constants, by value: a string is written as UTF-8
// (charEncoding cUTF8), and a map is valueTypeMap.
const (
	codecUTF8      = 1
	codecValueMap  = 9
	claimReqFields = 11
	// claimReqOptional are the fields written only when set (omitempty):
	// Wait, NodeDetached, ClaimIndex.
	claimReqOptional = 3
)

// plainVolumeClaimRequest has VolumeClaimRequest's fields and none of its
// methods, so go-msgpack encodes and decodes it by reflection: the
// fallback for a stream that is not a map, and the reference in tests.
type plainVolumeClaimRequest VolumeClaimRequest

// CodecEncodeSelf implements codec.Selfer.
func (r *VolumeClaimRequest) CodecEncodeSelf(e *codec.Encoder) {
	_, ee := codec.GenHelperEncoder(e)
	str := func(k, v string) {
		ee.WriteMapElemKey()
		ee.EncodeStringEnc(codecUTF8, k)
		ee.WriteMapElemValue()
		ee.EncodeStringEnc(codecUTF8, v)
	}
	boolean := func(k string, v bool) {
		ee.WriteMapElemKey()
		ee.EncodeStringEnc(codecUTF8, k)
		ee.WriteMapElemValue()
		ee.EncodeBool(v)
	}
	fields := claimReqFields
	if r.Wait != 0 {
		fields++ // omitempty: reflection writes Wait only when set
	}
	if r.NodeDetached {
		fields++ // omitempty, as Wait
	}
	if r.ClaimIndex != 0 {
		fields++ // omitempty, as Wait
	}
	ee.WriteMapStart(fields)
	// In the order go-msgpack writes struct fields: sorted by name.
	str("AccessMode", string(r.AccessMode))
	str("AllocID", r.AllocID)
	str("AttachmentMode", string(r.AttachmentMode))
	str("AuthToken", r.AuthToken)
	if r.ClaimIndex != 0 {
		ee.WriteMapElemKey()
		ee.EncodeStringEnc(codecUTF8, "ClaimIndex")
		ee.WriteMapElemValue()
		ee.EncodeUint(r.ClaimIndex)
	}
	str("ExternalNodeID", r.ExternalNodeID)
	boolean("Forwarded", r.Forwarded)
	str("Mode", string(r.Mode))
	if r.NodeDetached {
		boolean("NodeDetached", true)
	}
	str("NodeID", r.NodeID)
	ee.WriteMapElemKey()
	ee.EncodeStringEnc(codecUTF8, "Origin")
	ee.WriteMapElemValue()
	ee.WriteMapStart(3)
	str("PeerCert", r.Origin.PeerCert)
	str("Role", r.Origin.Role)
	boolean("TLS", r.Origin.TLS)
	ee.WriteMapEnd()
	boolean("Release", r.Release)
	str("VolumeID", r.VolumeID)
	if r.Wait != 0 {
		ee.WriteMapElemKey()
		ee.EncodeStringEnc(codecUTF8, "Wait")
		ee.WriteMapElemValue()
		ee.EncodeInt(int64(r.Wait))
	}
	ee.WriteMapEnd()
}

// CodecDecodeSelf implements codec.Selfer. As reflection does, it ignores
// fields it does not know (a newer writer's), and a nil value leaves a
// field at its zero value.
func (r *VolumeClaimRequest) CodecDecodeSelf(d *codec.Decoder) {
	gd, dd := codec.GenHelperDecoder(d)
	if dd.ContainerType() != codecValueMap {
		d.MustDecode((*plainVolumeClaimRequest)(r))
		return
	}
	str := func() string {
		if dd.TryDecodeAsNil() {
			return ""
		}
		return dd.DecodeString()
	}
	boolean := func() bool {
		if dd.TryDecodeAsNil() {
			return false
		}
		return dd.DecodeBool()
	}
	n := dd.ReadMapStart()
	for i := 0; n < 0 || i < n; i++ {
		if n < 0 && dd.CheckBreak() {
			break
		}
		dd.ReadMapElemKey()
		key := dd.DecodeStringAsBytes()
		dd.ReadMapElemValue()
		switch string(key) {
		case "VolumeID":
			r.VolumeID = str()
		case "AllocID":
			r.AllocID = str()
		case "NodeID":
			r.NodeID = str()
		case "ExternalNodeID":
			r.ExternalNodeID = str()
		case "Mode":
			r.Mode = ClaimMode(str())
		case "AccessMode":
			r.AccessMode = AccessMode(str())
		case "AttachmentMode":
			r.AttachmentMode = AttachmentMode(str())
		case "Release":
			r.Release = boolean()
		case "NodeDetached":
			r.NodeDetached = boolean()
		case "ClaimIndex":
			r.ClaimIndex = 0
			if !dd.TryDecodeAsNil() {
				r.ClaimIndex = dd.DecodeUint64()
			}
		case "Wait":
			r.Wait = 0
			if !dd.TryDecodeAsNil() {
				r.Wait = time.Duration(dd.DecodeInt64())
			}
		case "Forwarded":
			r.Forwarded = boolean()
		case "AuthToken":
			r.AuthToken = str()
		case "Origin":
			r.Origin = CallOrigin{}
			if !dd.TryDecodeAsNil() {
				d.MustDecode(&r.Origin)
			}
		default:
			gd.DecSwallow()
		}
	}
	dd.ReadMapEnd()
}

var _ codec.Selfer = (*VolumeClaimRequest)(nil)
