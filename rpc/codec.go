package rpc

import (
	"bufio"
	"fmt"
	"io"
	"net/rpc"
	"sync"

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

// NewServerCodec is the codec for calls this process serves. Each request
// may read at most maxBytes; a request that is larger or does not decode
// fails, and the stream is closed after the error is sent, so that a broken
// frame never desynchronises the requests behind it.
func NewServerCodec(conn io.ReadWriteCloser, maxBytes int64) rpc.ServerCodec {
	lim := &frameLimiter{r: bufio.NewReader(conn), max: maxBytes}
	rw := struct {
		io.Reader
		io.Writer
		io.Closer
	}{lim, conn, conn}
	return &limitedServerCodec{
		closeConnCodec: closeConnCodec{MsgpackCodec: msgpackrpc.NewCodecFromHandle(false, true, rw, structs.MsgpackHandle), conn: conn},
		lim:            lim,
	}
}

type limitedServerCodec struct {
	closeConnCodec
	lim    *frameLimiter
	broken error
}

func (c *limitedServerCodec) ReadRequestHeader(r *rpc.Request) error {
	if c.broken != nil {
		// net/rpc keeps reading after a body error; stop it here.
		return c.broken
	}
	c.lim.reset()
	if err := c.MsgpackCodec.ReadRequestHeader(r); err != nil {
		return c.fail(err)
	}
	return nil
}

func (c *limitedServerCodec) ReadRequestBody(out any) error {
	if err := c.MsgpackCodec.ReadRequestBody(out); err != nil {
		return c.fail(err)
	}
	return nil
}

func (c *limitedServerCodec) fail(err error) error {
	if err == io.EOF {
		c.broken = err
		return err
	}
	if c.lim.exceeded {
		err = structs.NewError(structs.CodeTooLarge, fmt.Sprintf("request exceeds %d bytes", c.lim.max))
	} else {
		err = structs.Invalid("request", fmt.Sprintf("malformed frame: %v", err))
	}
	c.broken = err
	return err
}

// frameLimiter counts the bytes of one request and fails past the limit.
type frameLimiter struct {
	r        io.Reader
	max      int64
	read     int64
	exceeded bool
}

func (l *frameLimiter) reset() { l.read = 0 }

func (l *frameLimiter) Read(p []byte) (int, error) {
	left := l.max - l.read
	if left <= 0 {
		l.exceeded = true
		return 0, fmt.Errorf("request exceeds %d bytes", l.max)
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := l.r.Read(p)
	l.read += int64(n)
	return n, err
}
