package rpc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"net/rpc"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	msgpackrpc "github.com/hashicorp/net-rpc-msgpackrpc/v2"

	"github.com/claimd/claimd/structs"
)

// NewClientCodec is the codec for calls this process makes.
func NewClientCodec(conn io.ReadWriteCloser) rpc.ClientCodec {
	return &closeConnCodec{MsgpackCodec: msgpackrpc.NewCodecFromHandle(true, true, conn, structs.MsgpackHandle), conn: conn}
}

// closeConnCodec closes the connection directly. MsgpackCodec.Close sets an
// unguarded flag that its reader goroutine reads (a data race when net/rpc
// closes a client while a response is awaited); closing the connection
// instead ends the reader with an error just the same.
type closeConnCodec struct {
	*msgpackrpc.MsgpackCodec
	conn io.Closer
	once sync.Once
	err  error
}

func (c *closeConnCodec) Close() error {
	c.once.Do(func() { c.err = c.conn.Close() })
	return c.err
}

// NewServerCodec is the codec for calls this process serves, with the
// per-request read deadline (RequestReadTimeout) and no budget. Each
// request may read at most maxBytes; a request that is larger or does not
// decode fails, and the stream is closed after the error is sent, so that
// a broken frame never desynchronises the requests behind it.
func NewServerCodec(conn io.ReadWriteCloser, maxBytes int64) rpc.ServerCodec {
	return NewLimitedServerCodec(conn, RequestLimits{MaxBytes: maxBytes, ReadTimeout: RequestReadTimeout})
}

// RequestLimits bound what one request may cost a server while it is read.
type RequestLimits struct {
	// MaxBytes bounds one request, header and body.
	MaxBytes int64
	// ReadTimeout bounds the read of one request from its first byte to
	// its last (0: none). Between requests there is no deadline.
	ReadTimeout time.Duration
	// Budget is charged for every byte an unfinished request holds, from
	// its first: the read buffer and the request's own buffer (nil: none).
	Budget *Budget
	// Refused, if set, is told of every request refused by the budget or
	// the deadline (for logs and counters); it must not block.
	Refused func(err *structs.CodedError)
}

// NewLimitedServerCodec is the codec for calls this process serves under
// lim. A request is read whole, as the raw msgpack values of its header
// and body, before anything is decoded: a partly sent request costs what
// it has sent (charged to lim.Budget), never what its lengths declare,
// and the decoder only ever sees complete frames.
//
// An idle codec holds no buffer: the read buffer is taken when a request's
// first byte arrives and given back when the request is read, and a
// response is written through a pooled buffer, so that an idle stream
// costs its goroutine and little else (issue 38: idle streams held
// 8 KiB of buffers each).
func NewLimitedServerCodec(conn io.ReadWriteCloser, lim RequestLimits) rpc.ServerCodec {
	return &limitedServerCodec{
		conn: conn,
		fr:   frameReader{conn: conn, lim: lim},
	}
}

// responseWriter is a pooled buffered encoder for responses.
type responseWriter struct {
	bw  *bufio.Writer
	enc *codec.Encoder
}

var responseWriters = sync.Pool{New: func() any {
	bw := bufio.NewWriter(nil)
	return &responseWriter{bw: bw, enc: codec.NewEncoder(bw, structs.MsgpackHandle)}
}}

// readBufferBytes is the size of a request's read buffer (pooled, and
// charged to the budget while a request holds it). Payloads larger than
// it are read straight into the request's buffer.
const readBufferBytes = 4 << 10

var readBuffers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferBytes) }}

type limitedServerCodec struct {
	conn io.ReadWriteCloser
	fr   frameReader

	wmu sync.Mutex // net/rpc writes responses from the handlers' goroutines

	closeOnce sync.Once
	closeErr  error
	broken    error
}

func (c *limitedServerCodec) ReadRequestHeader(r *rpc.Request) error {
	if c.broken != nil {
		// net/rpc keeps reading after a body error; stop it here.
		return c.broken
	}
	frame, err := c.fr.readValue(true)
	if err != nil {
		return c.fail(err)
	}
	if err := structs.Decode(frame, r); err != nil {
		return c.fail(malformed(err))
	}
	return nil
}

func (c *limitedServerCodec) ReadRequestBody(out any) error {
	if err := c.fr.refusal; err != nil {
		// The request was refused after its header was read: net/rpc
		// sends err as the answer to it.
		return c.fail(err)
	}
	frame, err := c.fr.readValue(false)
	if err != nil {
		return c.fail(err)
	}
	// The request is read; its bytes are held until it is decoded.
	defer c.fr.finish(false)
	if out == nil {
		return nil // net/rpc discards the body of a call it cannot serve
	}
	if err := structs.Decode(frame, out); err != nil {
		return c.fail(malformed(err))
	}
	return nil
}

func (c *limitedServerCodec) WriteResponse(r *rpc.Response, body any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	w := responseWriters.Get().(*responseWriter)
	w.bw.Reset(c.conn)
	err := w.enc.Encode(r)
	if err == nil {
		err = w.enc.Encode(body)
	}
	if err == nil {
		err = w.bw.Flush()
	}
	w.bw.Reset(nil)
	// Only a writer that wrote everything goes back to the pool. The
	// encoder keeps its first error and returns it from every later
	// Encode without writing a byte: one answer that failed to go out (a
	// caller that left while its answer was written) would otherwise make
	// every later answer encoded with it vanish, the server thinking it
	// answered and its callers waiting until their timeouts (issue 38:
	// after the blocking-query flood's process exited, the leader
	// answered nothing for minutes with no goroutine busy).
	if err == nil {
		responseWriters.Put(w)
	}
	return err
}

func (c *limitedServerCodec) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.conn.Close() })
	return c.closeErr
}

// fail ends the stream after err: net/rpc sends err as the reply (when
// the header was read) and reads no further request. The bytes of the
// failed request are released.
func (c *limitedServerCodec) fail(err error) error {
	c.fr.finish(true)
	c.broken = err
	return err
}

// streamEndNote ends the message of every error after which the server
// closes the stream: a client must not reuse the stream (MuxClient).
const streamEndNote = "; the server closed the stream"

func streamEnded(msg string) bool { return strings.HasSuffix(msg, streamEndNote) }

func malformed(err error) error {
	return structs.Invalid("request", fmt.Sprintf("malformed frame: %v%s", err, streamEndNote))
}

// frameReader reads a request's msgpack values (header, then body) whole
// into buf, walking the msgpack structure to find where each ends. It
// enforces RequestLimits: the request's size, the deadline from its first
// byte, and the budget for the buffer that holds it.
type frameReader struct {
	// r is the read buffer, nil while no request is being read (taken
	// from readBuffers at a request's first byte).
	r    *bufio.Reader
	conn io.ReadWriteCloser
	lim  RequestLimits
	one  [1]byte // a request's first byte, read before r is taken
	// refusal: the budget had no room for the read buffer, or for the
	// request buffer while the header was read. The header is then read
	// into small (no more than fits: a method name and a sequence
	// number), so that net/rpc can answer it with refusal (it answers
	// only a request whose header it has).
	refusal error
	small   [128]byte
	header  bool // the value being read is the request's header

	buf      []byte
	charged  int64 // bytes of buf's capacity charged to lim.Budget
	rcharged int64 // bytes of r charged to lim.Budget
	read     int64 // bytes of the current request read so far
	started  bool  // the current request's first byte has been read
}

// readValue reads one msgpack value into a fresh frame and returns it.
// first: the value is a request's header (its first byte starts the
// request; EOF there is the peer closing between requests).
func (f *frameReader) readValue(first bool) ([]byte, error) {
	f.buf = f.buf[:0]
	f.header = first
	// Values still to read; every value takes at least one byte, so a
	// count beyond the bytes left is too large at once.
	pending := uint64(1)
	for pending > 0 {
		b, err := f.readByte(first && f.read == 0)
		if err != nil {
			return nil, err
		}
		pending--
		var lenBytes int // bytes of a length that follows b
		var extra uint64 // payload bytes beyond the length (ext type)
		var payload uint64
		switch {
		case b <= 0x7f, b >= 0xe0, b == 0xc0, b == 0xc2, b == 0xc3:
			// fixint, negative fixint, nil, false, true
		case b >= 0x80 && b <= 0x8f: // fixmap
			pending += 2 * uint64(b&0x0f)
		case b >= 0x90 && b <= 0x9f: // fixarray
			pending += uint64(b & 0x0f)
		case b >= 0xa0 && b <= 0xbf: // fixstr
			payload = uint64(b & 0x1f)
		case b == 0xc4, b == 0xd9: // bin8, str8
			lenBytes = 1
		case b == 0xc5, b == 0xda: // bin16, str16
			lenBytes = 2
		case b == 0xc6, b == 0xdb: // bin32, str32
			lenBytes = 4
		case b == 0xc7: // ext8
			lenBytes, extra = 1, 1
		case b == 0xc8: // ext16
			lenBytes, extra = 2, 1
		case b == 0xc9: // ext32
			lenBytes, extra = 4, 1
		case b == 0xca, b == 0xce, b == 0xd2: // float32, uint32, int32
			payload = 4
		case b == 0xcb, b == 0xcf, b == 0xd3: // float64, uint64, int64
			payload = 8
		case b == 0xcc, b == 0xd0: // uint8, int8
			payload = 1
		case b == 0xcd, b == 0xd1: // uint16, int16
			payload = 2
		case b >= 0xd4 && b <= 0xd8: // fixext 1, 2, 4, 8, 16
			payload = 1 + 1<<(b-0xd4)
		case b == 0xdc, b == 0xde: // array16, map16
			lenBytes = 2
		case b == 0xdd, b == 0xdf: // array32, map32
			lenBytes = 4
		default: // 0xc1 is never used
			return nil, malformed(fmt.Errorf("invalid msgpack byte 0x%02x", b))
		}
		if lenBytes > 0 {
			n, err := f.readLength(lenBytes)
			if err != nil {
				return nil, err
			}
			switch b {
			case 0xdc, 0xdd:
				pending += n
			case 0xde, 0xdf:
				pending += 2 * n
			default:
				payload = n + extra
			}
		}
		if pending > uint64(f.lim.MaxBytes-f.read) {
			return nil, f.tooLarge()
		}
		if payload > 0 {
			if err := f.readPayload(payload); err != nil {
				return nil, err
			}
		}
	}
	return f.buf, nil
}

func (f *frameReader) readByte(startsRequest bool) (byte, error) {
	if f.read >= f.lim.MaxBytes {
		return 0, f.tooLarge()
	}
	var b byte
	var err error
	if f.r == nil {
		// Idle between requests: wait for the first byte with no buffer
		// held, then take one (charged) for the rest of the request. A
		// request refused a buffer reads its header here byte by byte.
		_, err = io.ReadFull(f.conn, f.one[:])
		b = f.one[0]
	} else {
		b, err = f.r.ReadByte()
	}
	if err != nil {
		if startsRequest && err == io.EOF {
			return 0, io.EOF
		}
		return 0, f.readErr(err)
	}
	if !f.started {
		f.started = true
		if f.lim.ReadTimeout > 0 {
			setReadDeadline(f.conn, time.Now().Add(f.lim.ReadTimeout))
		}
	}
	if f.r == nil && f.refusal == nil {
		if err := f.takeReader(); err != nil {
			f.refusal = err
			f.buf = f.small[:0]
		}
	}
	if err := f.appendByte(b); err != nil {
		return 0, err
	}
	return b, nil
}

func (f *frameReader) readLength(n int) (uint64, error) {
	var v uint64
	for range n {
		b, err := f.readByte(false)
		if err != nil {
			return 0, err
		}
		v = v<<8 | uint64(b)
	}
	return v, nil
}

// readPayload reads n bytes into buf as they arrive: the buffer grows
// with what has been received, never with what was declared.
func (f *frameReader) readPayload(n uint64) error {
	if n > uint64(f.lim.MaxBytes-f.read) {
		return f.tooLarge()
	}
	for n > 0 {
		if len(f.buf) == cap(f.buf) {
			if err := f.grow(); err != nil {
				return err
			}
		}
		room := f.buf[len(f.buf):cap(f.buf)]
		if uint64(len(room)) > n {
			room = room[:n]
		}
		var got int
		var err error
		if f.r != nil {
			got, err = f.r.Read(room)
		} else {
			got, err = f.conn.Read(room)
		}
		f.buf = f.buf[:len(f.buf)+got]
		f.read += int64(got)
		n -= uint64(got)
		if err != nil && n > 0 {
			return f.readErr(err)
		}
	}
	return nil
}

func (f *frameReader) appendByte(b byte) error {
	if len(f.buf) == cap(f.buf) {
		if err := f.grow(); err != nil {
			return err
		}
	}
	f.buf = append(f.buf, b)
	f.read++
	return nil
}

// minFrameBuffer is the least a new frame buffer holds.
const minFrameBuffer = 512

// grow doubles buf (up to MaxBytes), charging the budget for its whole
// capacity first. A request's first buffer is as large as what has
// already arrived, up to readBufferBytes, so that a small request is
// read into one buffer without growing it.
func (f *frameReader) grow() error {
	if f.refusal != nil {
		// A header larger than small: no answer is possible.
		return f.refusal
	}
	newCap := int64(2 * cap(f.buf))
	if cap(f.buf) == 0 {
		// A power of two, as every size after it.
		newCap = int64(min(max(1<<bits.Len(uint(f.r.Buffered())), minFrameBuffer), readBufferBytes))
	}
	newCap = min(newCap, max(f.lim.MaxBytes, minFrameBuffer))
	if err := f.charge(newCap-f.charged, &f.charged); err != nil {
		if f.header && len(f.buf) < len(f.small) {
			// Refused while the header is read (the read buffer was
			// charged, the request buffer finds no room): go on into
			// small, so that the refusal is answered. Unanswered, the
			// stream would end in a bare EOF (CI: the partial-request
			// flood's several-sessions run).
			f.refusal = err
			f.buf = append(f.small[:0], f.buf...)
			if f.charged > 0 {
				f.lim.Budget.give(f.charged)
				f.charged = 0
			}
			return nil
		}
		return err
	}
	nb := make([]byte, len(f.buf), newCap)
	copy(nb, f.buf)
	f.buf = nb
	return nil
}

// takeReader takes a read buffer for the request that has begun, charged
// to the budget.
func (f *frameReader) takeReader() error {
	if err := f.charge(readBufferBytes, &f.rcharged); err != nil {
		return err
	}
	f.r = readBuffers.Get().(*bufio.Reader)
	f.r.Reset(f.conn)
	return nil
}

// charge takes n bytes from the budget and adds them to *to, or refuses
// the request naming the budget that has no room.
func (f *frameReader) charge(n int64, to *int64) error {
	if n <= 0 || f.lim.Budget == nil {
		return nil
	}
	if by := f.lim.Budget.take(n); by != nil {
		return f.refused(structs.NewError(structs.CodeUnavailable, fmt.Sprintf(
			"request refused: unfinished requests on this %s hold %d of its %d bytes (rpc.%s), no room for %d more; retry later%s",
			by.Name(), by.Used(), by.Limit(), budgetConst(by.Name()), n, streamEndNote)))
	}
	*to += n
	return nil
}

func budgetConst(name string) string {
	switch name {
	case "session":
		return "SessionBudgetBytes"
	case "peer":
		return "PeerBudgetBytes"
	}
	return "ServerBudgetBytes"
}

// finish ends the current request (read, or failed): its deadline is
// cleared and its buffer dropped, with the budget it was charged. The
// buffer is never reused: decoded values may refer to it.
//
// The read buffer is kept only if it holds bytes of the next request and
// the stream goes on (done false); a failed stream gives everything back.
func (f *frameReader) finish(done bool) {
	if f.started && f.lim.ReadTimeout > 0 {
		setReadDeadline(f.conn, time.Time{})
	}
	// A yamux stream keeps its receive buffer, as large as the largest
	// frame it received (up to its 256 KiB window), while idle unless
	// told to let go of it.
	if s, ok := f.conn.(interface{ Shrink() }); ok {
		s.Shrink()
	}
	f.started = false
	f.read = 0
	f.buf = nil
	f.refusal = nil
	if f.charged > 0 {
		f.lim.Budget.give(f.charged)
		f.charged = 0
	}
	// The read buffer goes back once it holds nothing of the next request
	// (a client that sends requests back to back may have sent some).
	if f.r != nil && (done || f.r.Buffered() == 0) {
		f.r.Reset(nil)
		readBuffers.Put(f.r)
		f.r = nil
		if f.rcharged > 0 {
			f.lim.Budget.give(f.rcharged)
			f.rcharged = 0
		}
	}
}

func (f *frameReader) tooLarge() error {
	return structs.NewError(structs.CodeTooLarge, fmt.Sprintf("request exceeds %d bytes%s", f.lim.MaxBytes, streamEndNote))
}

// readErr maps a read error inside a request: the deadline is a coded
// timeout, the peer leaving is io.ErrUnexpectedEOF.
func (f *frameReader) readErr(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return f.refused(structs.NewError(structs.CodeTimeout, fmt.Sprintf(
			"request not read within %v of its first byte (rpc.RequestReadTimeout)%s", f.lim.ReadTimeout, streamEndNote)))
	}
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (f *frameReader) refused(err *structs.CodedError) error {
	if f.lim.Refused != nil {
		f.lim.Refused(err)
	}
	return err
}

func setReadDeadline(conn io.ReadWriteCloser, t time.Time) {
	if d, ok := conn.(interface{ SetReadDeadline(time.Time) error }); ok {
		_ = d.SetReadDeadline(t)
	}
}
