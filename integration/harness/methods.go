package harness

import (
	"reflect"
	"sort"
	"testing"

	"github.com/claimd/claimd/endpoints"
)

// RPCMethod is one method the servers register, found by reflection over
// the endpoints' receivers, with its access rule.
type RPCMethod struct {
	Name        string
	Rule        endpoints.AccessRule
	Args, Reply reflect.Type // what the method's two pointers point to
}

// RegisteredMethods lists every method endpoints.Register hands net/rpc
// (net/rpc's own rule: exported, func(*args, *reply) error), sorted by
// name, for the authorization matrices. A method without an access rule
// fails the test, and so does a rule that names no method (a misspelt
// entry leaves the real method without one).
func RegisteredMethods(t testing.TB) []RPCMethod {
	t.Helper()
	rules := endpoints.AccessRules()
	errorType := reflect.TypeFor[error]()
	registered := map[string]bool{}
	var out []RPCMethod
	// The receivers are only reflected on: their nil Deps is never called.
	for svc, rcvr := range endpoints.Receivers(nil, endpoints.ConnInfo{}) {
		typ := reflect.TypeOf(rcvr)
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			ft := m.Type // the receiver is In(0)
			if ft.NumIn() != 3 || ft.NumOut() != 1 || ft.Out(0) != errorType || ft.In(2).Kind() != reflect.Pointer {
				continue // net/rpc does not register it
			}
			name := svc + "." + m.Name
			registered[name] = true
			if ft.In(1).Kind() != reflect.Pointer {
				t.Errorf("%s: args exp: a pointer (every request carries a token) got: %s", name, ft.In(1))
				continue
			}
			rule, ok := rules[name]
			if !ok {
				t.Errorf("%s: access rule exp: an entry in endpoints' methodAccess got: none", name)
				continue
			}
			out = append(out, RPCMethod{Name: name, Rule: rule, Args: ft.In(1).Elem(), Reply: ft.In(2).Elem()})
		}
	}
	for name := range rules {
		if !registered[name] {
			t.Errorf("access rule %q exp: a registered method got: none (stale or misspelt entry)", name)
		}
	}
	if len(out) < 40 {
		t.Fatalf("registered methods exp: >= 40 got: %d (the reflection found too few)", len(out))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
