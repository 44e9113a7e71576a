package netlab

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/testutil"
)

func TestCut_DropsOneDirectionOnly(t *testing.T) {
	t.Parallel()
	lab := New(t, "a", "b")
	p := newProbes(t, lab)
	p.expect()

	if err := lab.Cut("a", "b"); err != nil {
		t.Fatal(err)
	}
	p.expect("a>b")

	if err := lab.Heal(); err != nil {
		t.Fatal(err)
	}
	p.expect()
}

func TestPartitionIsolateHeal(t *testing.T) {
	t.Parallel()
	lab := New(t, "a", "b", "c")
	p := newProbes(t, lab)

	if err := lab.Partition("a", "b"); err != nil {
		t.Fatal(err)
	}
	p.expect("a>b", "b>a")

	if err := lab.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := lab.Isolate("c"); err != nil {
		t.Fatal(err)
	}
	p.expect("a>c", "c>a", "b>c", "c>b")

	if err := lab.Heal(); err != nil {
		t.Fatal(err)
	}
	p.expect()
}

func TestBridge_OnlyTheMiddleHostSeesBoth(t *testing.T) {
	t.Parallel()
	lab := New(t, "a", "b", "c")
	p := newProbes(t, lab)

	// A bridge replaces faults on its two live links.
	if err := lab.Isolate("b"); err != nil {
		t.Fatal(err)
	}
	if err := lab.Bridge("a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	p.expect("a>c", "c>a")

	if err := lab.Heal(); err != nil {
		t.Fatal(err)
	}
	p.expect()
}

func TestFaults_AreIdempotent(t *testing.T) {
	t.Parallel()
	lab := New(t, "a", "b")
	for range 3 {
		if err := lab.Cut("a", "b"); err != nil {
			t.Fatal(err)
		}
		if err := lab.DropSYN("a", "b"); err != nil { // covered by the cut
			t.Fatal(err)
		}
	}
	out, err := inNetns(lab.Namespace("b"), "", "nft", "list", "chain", "inet", "chaos", "input")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "\"dropped\" drop"); n != 1 {
		t.Fatalf("exp: 1 rule in b got: %d\n%s", n, out)
	}
	for range 2 {
		if err := lab.Heal(); err != nil {
			t.Fatal(err)
		}
	}
	out, err = inNetns(lab.Namespace("b"), "", "nft", "list", "chain", "inet", "chaos", "input")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "\"dropped\" drop") {
		t.Fatalf("exp: no rule in b after Heal got:\n%s", out)
	}
	if err := lab.Cut("a", "a"); err == nil {
		t.Fatal("exp: error for a cut of a host from itself got: nil")
	}
	if err := lab.Cut("a", "nope"); err == nil {
		t.Fatal("exp: error for an unknown host got: nil")
	}
}

func TestDropSYN_BlocksNewConnectionsNotEstablishedOnes(t *testing.T) {
	t.Parallel()
	lab := New(t, "a", "b")
	for _, h := range []string{"a", "b"} {
		ln, err := lab.Listen(h, net.JoinHostPort(lab.Addr(h), "7000"))
		if err != nil {
			t.Fatal(err)
		}
		serveEcho(t, ln)
	}
	toB := net.JoinHostPort(lab.Addr("b"), "7000")
	toA := net.JoinHostPort(lab.Addr("a"), "7000")

	established, err := dial(lab, "a", toB, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer established.Close()
	if err := roundTrip(established, "before"); err != nil {
		t.Fatal(err)
	}

	if err := lab.DropSYN("a", "b"); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(established, "after: still flowing"); err != nil {
		t.Fatalf("established connection: %v", err)
	}

	// A new connection a→b: its SYN reaches b and is dropped there (the
	// counter proves it); cancelling the dial then must find it unconnected.
	before, err := lab.Dropped("b")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dialed := make(chan error, 1)
	go func() {
		c, err := lab.Dialer("a")(ctx, toB)
		if c != nil {
			c.Close()
		}
		dialed <- err
	}()
	testutil.WaitFor(t, 5*time.Second, func() error {
		n, err := lab.Dropped("b")
		if err == nil && n <= before {
			err = fmt.Errorf("exp: SYN dropped at b got: drop counter %d", n)
		}
		return err
	})
	cancel()
	if err := <-dialed; err == nil {
		t.Fatal("exp: new connection a→b fails under DropSYN got: connected")
	}

	// One-way: b still connects to a (a's SYN-ACK carries ACK and passes).
	c, err := dial(lab, "b", toA, 5*time.Second)
	if err != nil {
		t.Fatalf("exp: b→a connects under DropSYN a→b got: %v", err)
	}
	defer c.Close()
	if err := roundTrip(c, "b to a"); err != nil {
		t.Fatal(err)
	}

	if err := lab.Heal(); err != nil {
		t.Fatal(err)
	}
	c2, err := dial(lab, "a", toB, 5*time.Second)
	if err != nil {
		t.Fatalf("exp: a→b connects after Heal got: %v", err)
	}
	defer c2.Close()
	if err := roundTrip(c2, "healed"); err != nil {
		t.Fatal(err)
	}
}
