package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/claimd/claimd/structs"
)

// The snapshot stream (protocol byte rpc.ProtoSnapshot, inside TLS when
// TLS is on) carries archives, which can be far larger than one net/rpc
// request may be (rpc.MaxRequestBytes). After the protocol byte:
//
//	client: frame(Request)
//	server: frame(Response)        refusal (Error set; the server closes)
//	                               or go-ahead (save: Index of the state)
//	save:    server: chunks, end; frame(Response)   final: Error if the
//	                                                stream failed midway
//	restore: client: chunks, end; server: frame(Response)   final: the
//	                                                outcome, Index of the
//	                                                restore
//
// A frame is a 4-byte big-endian length and that many bytes of msgpack,
// at most MaxFrameBytes. The archive travels in chunks: a 4-byte length
// and that many bytes, at most maxChunkBytes; length 0 ends it, so a
// stream cut short is told from a complete one.

// Op is what a snapshot stream does.
type Op string

const (
	// OpSave streams an archive of the state to the client.
	OpSave Op = "save"
	// OpRestore streams an archive from the client and restores it.
	OpRestore Op = "restore"
)

// Request opens a snapshot stream.
type Request struct {
	Op        Op
	AuthToken string
	// AllowStale lets any server save its own state (no leader needed).
	AllowStale bool
	// Forwarded is set by a server that passes the stream on to the
	// leader: the receiver serves it itself or fails, never passes it on.
	Forwarded bool
}

// Response answers a Request: once before the archive moves, once after.
type Response struct {
	Error string
	Code  structs.ErrorCode
	// Index: for a save, the Raft index of the state (Meta.Index); for a
	// restore, the leader's applied index once the restore was committed.
	Index uint64
}

// ResponseFor makes the response for an outcome.
func ResponseFor(err error, index uint64) Response {
	if err == nil {
		return Response{Index: index}
	}
	var ce *structs.CodedError
	if errors.As(err, &ce) {
		return Response{Error: ce.Message, Code: ce.Code, Index: index}
	}
	return Response{Error: err.Error(), Index: index}
}

// Err is the response's error, with its code for errors.Is.
func (r *Response) Err() error {
	if r.Error == "" && r.Code == "" {
		return nil
	}
	if r.Code != "" {
		return structs.NewError(r.Code, r.Error)
	}
	return errors.New(r.Error)
}

// MaxFrameBytes bounds a Request or Response frame.
const MaxFrameBytes = 64 << 10

// maxChunkBytes bounds one chunk of the archive.
const maxChunkBytes = 64 << 10

// WriteFrame writes v as one frame.
func WriteFrame(w io.Writer, v any) error {
	body, err := structs.EncodeMsgpack(v)
	if err != nil {
		return fmt.Errorf("snapshot stream: encode: %w", err)
	}
	if len(body) > MaxFrameBytes {
		return fmt.Errorf("snapshot stream: frame of %d bytes, at most %d", len(body), MaxFrameBytes)
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	_, err = w.Write(buf)
	return err
}

// ReadFrame reads one frame into v.
func ReadFrame(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return fmt.Errorf("snapshot stream: read frame: %w", err)
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > MaxFrameBytes {
		return fmt.Errorf("snapshot stream: frame of %d bytes, at most %d", size, MaxFrameBytes)
	}
	// Grown as the bytes arrive, not allocated at the declared size: a
	// peer that declares 64 KiB and sends 10 bytes holds 10 bytes (the
	// request frame is read before any token is checked).
	body, err := io.ReadAll(io.LimitReader(r, int64(size)))
	if err != nil {
		return fmt.Errorf("snapshot stream: read frame: %w", err)
	}
	if len(body) < int(size) {
		return fmt.Errorf("snapshot stream: read frame: %w", io.ErrUnexpectedEOF)
	}
	if err := structs.Decode(body, v); err != nil {
		return fmt.Errorf("snapshot stream: decode frame: %w", err)
	}
	return nil
}

// ChunkWriter sends an archive as chunks. Close sends the end marker (and
// does not close the underlying writer).
type ChunkWriter struct {
	w   io.Writer
	buf []byte
}

// NewChunkWriter makes a ChunkWriter on w.
func NewChunkWriter(w io.Writer) *ChunkWriter {
	return &ChunkWriter{w: w, buf: make([]byte, 4, 4+maxChunkBytes)}
}

func (c *ChunkWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), cap(c.buf)-len(c.buf))
		c.buf = append(c.buf, p[:n]...)
		p, written = p[n:], written+n
		if len(c.buf) == cap(c.buf) {
			if err := c.flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

func (c *ChunkWriter) flush() error {
	if len(c.buf) == 4 {
		return nil
	}
	binary.BigEndian.PutUint32(c.buf, uint32(len(c.buf)-4))
	_, err := c.w.Write(c.buf)
	c.buf = c.buf[:4]
	return err
}

// Close sends what is buffered and the end marker.
func (c *ChunkWriter) Close() error {
	if err := c.flush(); err != nil {
		return err
	}
	_, err := c.w.Write([]byte{0, 0, 0, 0})
	return err
}

// ChunkReader reads an archive sent as chunks: io.EOF at the end marker,
// an error wrapping io.ErrUnexpectedEOF when the stream ends before it.
type ChunkReader struct {
	r    io.Reader
	left uint32
	done bool
}

// NewChunkReader makes a ChunkReader on r.
func NewChunkReader(r io.Reader) *ChunkReader { return &ChunkReader{r: r} }

func (c *ChunkReader) Read(p []byte) (int, error) {
	for c.left == 0 {
		if c.done {
			return 0, io.EOF
		}
		var n [4]byte
		if _, err := io.ReadFull(c.r, n[:]); err != nil {
			return 0, ended(err)
		}
		c.left = binary.BigEndian.Uint32(n[:])
		if c.left == 0 {
			c.done = true
			return 0, io.EOF
		}
		if c.left > maxChunkBytes {
			return 0, fmt.Errorf("snapshot stream: chunk of %d bytes, at most %d", c.left, maxChunkBytes)
		}
	}
	if uint32(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= uint32(n)
	if err != nil {
		if errors.Is(err, io.EOF) && c.left == 0 && n > 0 {
			return n, nil // the next Read reports the missing end marker
		}
		return n, ended(err)
	}
	return n, nil
}

// ended turns the end of the underlying stream into "cut short".
func ended(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("snapshot stream ended before the archive did: %w", io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("snapshot stream: %w", err)
}
