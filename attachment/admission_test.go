package attachment

import (
	"errors"
	"strings"
	"testing"

	"github.com/claimd/claimd/fsm/fsmtest"
	"github.com/claimd/claimd/structs"
)

// TestControllerCall_OnlyAdmittedControllers (issue 38): a healthy
// controller that registered without admission is never asked, not even
// when named; with only pending controllers the call fails with an error
// that names them and the command that admits them, and nothing is sent.
// An admission makes it a target; a revoke takes that back.
func TestControllerCall_OnlyAdmittedControllers(t *testing.T) {
	l := cluster(t) // c1 and c2 admitted (registered as with ACLs off)
	l.Must(t, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: &structs.Node{
		ID: "rogue", SecretID: "s-rogue", Status: structs.NodeStatusReady,
		CSIControllerPlugins: map[string]*structs.CSIInfo{"p": {PluginID: "p", Healthy: true, RequiresControllerPlugin: true}}}})
	n := &nodes{}
	m := New(l, n, fsmtest.HeldLease(), nil)
	call := func(named string) (string, error) {
		req := &structs.ClientCSIControllerDetachRequest{CSIControllerQuery: structs.CSIControllerQuery{PluginID: "p", ControllerNodeID: named}}
		answered := ""
		err := m.ControllerCall("ClientCSI.ControllerDetachVolume", &req.CSIControllerQuery, &req.NodeRouting, req,
			&structs.ClientCSIControllerDetachResponse{}, func(node string) { answered = node })
		return answered, err
	}
	for range 50 {
		if node, err := call(""); err != nil || node == "rogue" {
			t.Fatalf("exp: an admitted controller answers got: %q %v", node, err)
		}
	}
	if _, err := call("rogue"); !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), "not admitted") {
		t.Fatalf("named pending controller exp: invalid, not admitted got: %v", err)
	}
	for _, id := range []string{"c1", "c2"} {
		l.Must(t, structs.PluginRevokeControllerRequestType, &structs.PluginAdmissionRequest{PluginID: "p", NodeID: id})
	}
	before := len(n.log())
	_, err := call("")
	if !errors.Is(err, structs.ErrUnschedulable) || !strings.Contains(err.Error(), "c1, c2, rogue") ||
		!strings.Contains(err.Error(), "claimd plugin admit p") {
		t.Fatalf("only pending controllers exp: unschedulable naming c1, c2, rogue and the admit command got: %v", err)
	}
	if len(n.log()) != before {
		t.Fatalf("exp: nothing sent got: %v", n.log()[before:])
	}
	l.Must(t, structs.PluginAdmitControllerRequestType, &structs.PluginAdmissionRequest{PluginID: "p", NodeID: "rogue"})
	if node, err := call(""); err != nil || node != "rogue" {
		t.Fatalf("after admitting rogue exp: rogue answers got: %q %v", node, err)
	}
}
