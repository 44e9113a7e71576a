// Command queryflood is the attacker of TestFlood_BlockingQueriesAndRegistrations
// (integration/security_query_flood_test.go): many blocking Volume.List
// queries with one token over many yamux sessions to one server, each asked
// again at once after an answer (for the change after the newest index its
// session has seen) and when its refusal's retry-after hint says. It runs as
// its own process, built without the race detector, so that the attacker's
// own work does not take the CPU of the machine the servers share with it.
// It prints its counts as JSON when -for has passed.
package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	netrpc "net/rpc"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"

	"github.com/claimd/claimd/rpc"
	"github.com/claimd/claimd/structs"
	"github.com/claimd/claimd/tlsutil"
)

// Counts is what the flood achieved.
type Counts struct {
	Answered, Refused, Hinted, Other int64
	FirstOther                       string
}

// indexOnly is an answer with everything but its index skipped.
type indexOnly struct{ Index uint64 }

func main() {
	addr := flag.String("addr", "", "server address")
	ca := flag.String("ca", "", "CA file")
	cert := flag.String("cert", "", "certificate file")
	key := flag.String("key", "", "key file")
	token := flag.String("token", "", "ACL token")
	sessions := flag.Int("sessions", 30, "sessions")
	perSession := flag.Int("per-session", 100, "queries per session")
	streams := flag.Int("streams", 10, "streams per session")
	start := flag.Uint64("index", 1, "the index the first queries wait past")
	dur := flag.Duration("for", 15*time.Second, "how long")
	flag.Parse()
	cfg, err := tlsutil.ClientConfigFromFiles(*ca, *cert, *key, tlsutil.DefaultRegion)
	if err != nil {
		fail(err)
	}
	var c Counts
	var otherOnce sync.Once
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sess []*yamux.Session
	for range *sessions {
		s, err := dial(*addr, cfg)
		if err != nil {
			fail(err)
		}
		sess = append(sess, s)
		var clients []*netrpc.Client
		for range *streams {
			st, err := s.OpenStream()
			if err != nil {
				fail(err)
			}
			clients = append(clients, netrpc.NewClientWithCodec(rpc.NewClientCodec(st)))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan *netrpc.Call, *perSession)
			slotOf := map[*structs.VolumeListRequest]int{}
			latest := *start
			send := func(slot int) {
				args := &structs.VolumeListRequest{QueryOptions: structs.QueryOptions{AuthToken: *token,
					AllowStale: true, MinQueryIndex: latest, MaxQueryTime: time.Minute}}
				slotOf[args] = slot
				clients[slot%len(clients)].Go("Volume.List", args, &indexOnly{}, done)
			}
			for slot := range *perSession {
				send(slot)
			}
			type retry struct {
				slot int
				at   time.Time
			}
			var retries []retry
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					now, keep := time.Now(), retries[:0]
					for _, r := range retries {
						if now.After(r.at) {
							send(r.slot)
						} else {
							keep = append(keep, r)
						}
					}
					retries = keep
				case call := <-done:
					args := call.Args.(*structs.VolumeListRequest)
					slot := slotOf[args]
					delete(slotOf, args)
					err := structs.ParseError(call.Error)
					switch {
					case err == nil:
						atomic.AddInt64(&c.Answered, 1)
						latest = max(latest, call.Reply.(*indexOnly).Index)
						send(slot)
						continue
					case errors.Is(err, structs.ErrUnavailable):
						atomic.AddInt64(&c.Refused, 1)
						if _, ok := structs.RetryAfter(err); ok {
							atomic.AddInt64(&c.Hinted, 1)
						}
					default:
						atomic.AddInt64(&c.Other, 1)
						otherOnce.Do(func() { c.FirstOther = err.Error() })
					}
					after, _ := structs.RetryAfter(err)
					retries = append(retries, retry{slot: slot, at: time.Now().Add(max(after, 200*time.Millisecond))})
				}
			}
		}()
	}
	time.Sleep(*dur)
	close(stop)
	wg.Wait()
	for _, s := range sess {
		s.Close()
	}
	if err := json.NewEncoder(os.Stdout).Encode(&c); err != nil {
		fail(err)
	}
}

func dial(addr string, cfg *tls.Config) (*yamux.Session, error) {
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = raw.SetDeadline(time.Now().Add(rpc.HandshakeTimeout))
	if _, err := raw.Write([]byte{byte(rpc.ProtoTLS)}); err != nil {
		return nil, err
	}
	tc := tls.Client(raw, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	if _, err := tc.Write([]byte{byte(rpc.ProtoMux)}); err != nil {
		return nil, err
	}
	_ = raw.SetDeadline(time.Time{})
	return yamux.Client(tc, rpc.YamuxConfig(hclog.NewNullLogger()))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "queryflood:", err)
	os.Exit(1)
}
