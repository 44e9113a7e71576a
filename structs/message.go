package structs

import (
	"bytes"
	"fmt"
	"reflect"

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
	var buf bytes.Buffer
	buf.WriteByte(uint8(t))
	if err := codec.NewEncoder(&buf, MsgpackHandle).Encode(msg); err != nil {
		return nil, fmt.Errorf("encode log entry type %d: %w", t, err)
	}
	return buf.Bytes(), nil
}

// Decode reads a msgpack body (without the type byte) into out.
func Decode(buf []byte, out any) error {
	return codec.NewDecoderBytes(buf, MsgpackHandle).Decode(out)
}

// EncodeMsgpack encodes any value with the shared handle (snapshots, tests).
func EncodeMsgpack(v any) ([]byte, error) {
	var out []byte
	err := codec.NewEncoderBytes(&out, MsgpackHandle).Encode(v)
	return out, err
}
