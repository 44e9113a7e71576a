package structs

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// MessageType is the first byte of every Raft log entry; the rest is the
// msgpack body of the request it carries.
type MessageType uint8

// IgnoreUnknownTypeFlag marks an entry that a server which does not know its
// type may skip. Entries without it are fatal when unknown, because skipping
// them would let servers' states diverge.
const IgnoreUnknownTypeFlag MessageType = 0x80

// Log entry types. The numbers are part of the on-disk format: never reuse
// or renumber one.
const (
	VolumeRegisterRequestType    MessageType = 1
	VolumeDeregisterRequestType  MessageType = 2
	NodeRegisterRequestType      MessageType = 3
	NodeUpdateStatusRequestType  MessageType = 4
	NodeDeregisterRequestType    MessageType = 5
	AllocPlaceRequestType        MessageType = 6
	AllocStopRequestType         MessageType = 7
	AllocClientUpdateRequestType MessageType = 8
	ClaimBatchRequestType        MessageType = 9
	ClaimCheckpointRequestType   MessageType = 10
	EvalUpsertRequestType        MessageType = 11
	EvalCompleteRequestType      MessageType = 12
	CheckpointBatchRequestType   MessageType = 13
	ACLBootstrapRequestType      MessageType = 14
	ACLPolicyUpsertRequestType   MessageType = 15
	ACLPolicyDeleteRequestType   MessageType = 16
	ACLTokenUpsertRequestType    MessageType = 17
	ACLTokenDeleteRequestType    MessageType = 18
	VolumeCapacityRequestType    MessageType = 19
	NodeEligibilityRequestType   MessageType = 20
	// StorageReportRequestType records a reconciliation round (issue 27).
	// It is advisory, so its writer sets IgnoreUnknownTypeFlag: a server
	// of an older version skips it during a rolling upgrade. 21 is left
	// for the drain work landing beside it.
	StorageReportRequestType MessageType = 22
	// VolumeModifiedRequestType records a volume's mutable parameters
	// after the plugin changed them (ControllerModifyVolume).
	VolumeModifiedRequestType MessageType = 23
	// NodePurgeRequestType removes a deregistered node's reservation of
	// its ID (issue 38).
	NodePurgeRequestType MessageType = 24
	// PluginAdmitControllerRequestType and PluginRevokeControllerRequestType
	// admit a node's controller plugin to controller calls, or take the
	// admission back (issue 38).
	PluginAdmitControllerRequestType  MessageType = 25
	PluginRevokeControllerRequestType MessageType = 26
	// FenceReportRequestType records a node's fence report on the volumes
	// it names (issue 39: a failed fence is shown on the volume). It is
	// advisory, written with IgnoreUnknownTypeFlag like a storage report:
	// a server of an older version skips it during a rolling upgrade.
	FenceReportRequestType MessageType = 27
	// AllocGCRequestType removes terminal allocations that hold no claim
	// (`claimd system gc`, and a benchmark's own cleanup).
	AllocGCRequestType MessageType = 28
	// ClaimBatchDetachedRequestType and AllocClientUpdateDetachedRequestType
	// are ClaimBatch and AllocClientUpdate entries whose releases may carry
	// the holding node's "node detached" statement (VolumeClaimRequest.
	// NodeDetached, AllocClientUpdate.DetachedVolumes). Under types 9 and
	// 8 the state machine ignores those fields, as a server older than them
	// does, so no log replays differently. Written without the ignore flag
	// (an older server that gets one stops rather than diverge), and only
	// once every server in the configuration reports FeatureHolderDetached
	// (decision 61).
	ClaimBatchDetachedRequestType        MessageType = 29
	AllocClientUpdateDetachedRequestType MessageType = 30
)

// MsgpackHandle is the one msgpack configuration used for the wire and the
// log, so that what one server writes every other server reads the same way.
var MsgpackHandle = func() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	h.RawToString = true
	h.WriteExt = true
	h.MapType = reflect.TypeOf(map[string]any(nil))
	// Bound the up-front allocation a length prefix can cause: a hostile
	// frame claiming a 4 GiB array must not make us allocate 4 GiB.
	h.MaxInitLen = 4096
	return h
}()

// Encode builds a log entry: the type byte, then the msgpack body.
func Encode(t MessageType, msg any) ([]byte, error) {
	out, err := encodePooled([]byte{uint8(t)}, msg)
	if err != nil {
		return nil, fmt.Errorf("encode log entry type %d: %w", t, err)
	}
	return out, nil
}

// Decode reads a msgpack body (without the type byte) into out.
func Decode(buf []byte, out any) error {
	d := decoderPool.Get().(*codec.Decoder)
	d.ResetBytes(buf)
	if err := d.Decode(out); err != nil {
		return err // the decoder is not reused after a failure
	}
	// Let go of buf: a pooled decoder must not keep a log entry alive.
	d.ResetBytes(noBytes)
	decoderPool.Put(d)
	return nil
}

// The leader encodes every log entry and every server decodes it; a new
// codec.Encoder or Decoder costs about a kilobyte of setup, and encoding
// into a growing buffer copies the entry several times over. Encoders and
// decoders are therefore reused, and an entry is encoded into a reused
// scratch buffer, then copied once into a slice of its exact size (the
// entry belongs to Raft from then on). The bytes are the same as a fresh
// encoder's (TestEncodePooled_SameBytesAsAFreshEncoder).
type pooledEncoder struct {
	enc     *codec.Encoder
	scratch []byte
}

// maxPooledScratch bounds the scratch buffer kept between entries: a rare
// large entry (a register of thousands of volumes) is not kept alive.
const maxPooledScratch = 256 << 10

var (
	encoderPool = sync.Pool{New: func() any {
		p := &pooledEncoder{scratch: make([]byte, 0, 4096)}
		p.enc = codec.NewEncoderBytes(&p.scratch, MsgpackHandle)
		return p
	}}
	decoderPool = sync.Pool{New: func() any { return codec.NewDecoderBytes(noBytes, MsgpackHandle) }}
	noBytes     = []byte{}
)

// encodePooled returns prefix followed by v's msgpack encoding, in a new
// slice of exactly that length.
func encodePooled(prefix []byte, v any) ([]byte, error) {
	p := encoderPool.Get().(*pooledEncoder)
	p.scratch = p.scratch[:0]
	p.enc.ResetBytes(&p.scratch)
	if err := p.enc.Encode(v); err != nil {
		return nil, err // the encoder is not reused after a failure
	}
	out := make([]byte, len(prefix)+len(p.scratch))
	copy(out, prefix)
	copy(out[len(prefix):], p.scratch)
	if cap(p.scratch) <= maxPooledScratch {
		encoderPool.Put(p)
	}
	return out, nil
}

// EncodeMsgpack encodes any value with the shared handle (snapshots, tests).
func EncodeMsgpack(v any) ([]byte, error) {
	return encodePooled(nil, v)
}
