package structs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// RetryAfterMarker starts the part of an unavailable answer that says how
// long the caller should wait before it asks again: a server refusing work
// it has no room for (a blocking query past its limits, a new node past
// its certificate's rate) says when to come back, so that callers spread
// their retries instead of asking again at once. A marker in the message,
// like TopologyRefusal, so that the answer stays unavailable (retryable)
// for callers that do not know it, and survives RPC hops and Wrap.
const RetryAfterMarker = "retry after "

// maxRetryAfter bounds what a caller believes of a server's hint.
const maxRetryAfter = time.Minute

// RetryLater is an unavailable answer: msg, then when to retry.
func RetryLater(msg string, after time.Duration) error {
	// Whole milliseconds: the message stays short and parses back exactly.
	after = after.Round(time.Millisecond)
	return NewError(CodeUnavailable, fmt.Sprintf("%s; %s%v", msg, RetryAfterMarker, after))
}

// RetryAfter reports the wait an unavailable answer asks for, if it names
// one (RetryLater), capped at a minute.
func RetryAfter(err error) (time.Duration, bool) {
	err = ParseError(err)
	if !errors.Is(err, ErrUnavailable) {
		return 0, false
	}
	msg := err.Error()
	i := strings.LastIndex(msg, RetryAfterMarker)
	if i < 0 {
		return 0, false
	}
	rest := msg[i+len(RetryAfterMarker):]
	if j := strings.IndexAny(rest, " ;)"); j >= 0 {
		rest = rest[:j]
	}
	d, perr := time.ParseDuration(rest)
	if perr != nil || d <= 0 {
		return 0, false
	}
	return min(d, maxRetryAfter), true
}

// WaitRetryAfter reports whether to ask again after err, having waited:
// err is a refusal made before any work with a hint of when to come back
// (RetryLater). The wait is the hint, spread by up to a quarter more, and
// never none: asking again at once is the busy loop the hint is there to
// prevent. False at once when err has no hint or ctx ends before the wait
// would.
func WaitRetryAfter(ctx context.Context, err error) bool {
	after, ok := RetryAfter(err)
	if !ok {
		return false
	}
	after += time.Duration(rand.Int64N(int64(after)/4 + 1))
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < after {
		return false
	}
	t := time.NewTimer(after)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
