package hostdir

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// methodCounts is a repeatable -fail METHOD:N flag (commas allowed too).
type methodCounts map[string]int

func (m methodCounts) String() string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+":"+strconv.Itoa(v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (m methodCounts) Set(s string) error {
	for _, item := range strings.Split(s, ",") {
		method, val, ok := strings.Cut(strings.TrimSpace(item), ":")
		if !ok || method == "" {
			return fmt.Errorf("%q is not METHOD:N", item)
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 {
			return fmt.Errorf("%q: N must be a non-negative integer", item)
		}
		m[method] = n
	}
	return nil
}

// methodDelays is a repeatable -delay METHOD:DURATION flag.
type methodDelays map[string]time.Duration

func (m methodDelays) String() string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+":"+v.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (m methodDelays) Set(s string) error {
	for _, item := range strings.Split(s, ",") {
		method, val, ok := strings.Cut(strings.TrimSpace(item), ":")
		if !ok || method == "" {
			return fmt.Errorf("%q is not METHOD:DURATION", item)
		}
		d, err := time.ParseDuration(val)
		if err != nil || d < 0 {
			return fmt.Errorf("%q: bad duration", item)
		}
		m[method] = d
	}
	return nil
}

// segments is a repeatable -topology KEY=VALUE flag (commas allowed too).
type segments map[string]string

func (m segments) String() string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (m segments) Set(s string) error {
	for _, item := range strings.Split(s, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || key == "" || val == "" {
			return fmt.Errorf("%q is not KEY=VALUE", item)
		}
		m[key] = val
	}
	return nil
}
