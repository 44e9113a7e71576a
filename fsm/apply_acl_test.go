package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/claimd/claimd/structs"
)

func testToken(accessor, secret, typ string, policies ...string) *structs.ACLToken {
	return &structs.ACLToken{AccessorID: accessor, SecretID: secret, Name: accessor, Type: typ, Policies: policies}
}

const (
	secretA = "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
	secretB = "bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"
)

func TestACLBootstrap_OncePerClusterUnlessResetIndexMatches(t *testing.T) {
	h := mustNewHarness(t)
	first := h.apply(structs.ACLBootstrapRequestType, &structs.ACLBootstrapRequest{NewToken: testToken("boot1", secretA, structs.ACLTokenManagement)})
	if err, _ := first.(error); err != nil {
		t.Fatalf("exp: first bootstrap accepted got: %v", err)
	}
	done := h.f.State().ACLBootstrapIndex()
	if done == 0 {
		t.Fatalf("exp: bootstrap index recorded got: 0")
	}
	second := h.apply(structs.ACLBootstrapRequestType, &structs.ACLBootstrapRequest{NewToken: testToken("boot2", secretB, structs.ACLTokenManagement)})
	if err, _ := second.(error); !errors.Is(err, structs.ErrConflict) {
		t.Fatalf("exp: second bootstrap refused with conflict got: %v", second)
	}
	if tok, _ := h.f.State().ACLTokenByAccessor(nil, "boot2"); tok != nil {
		t.Fatalf("exp: refused bootstrap wrote nothing got: %+v", tok)
	}
	reset := h.apply(structs.ACLBootstrapRequestType, &structs.ACLBootstrapRequest{
		NewToken: testToken("boot2", secretB, structs.ACLTokenManagement), ResetIndex: done})
	if err, _ := reset.(error); err != nil {
		t.Fatalf("exp: bootstrap with the reset index accepted got: %v", err)
	}
}

func TestACLTokenBySecret_FindsOnlyTheExactSecret(t *testing.T) {
	h := mustNewHarness(t)
	h.apply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{
		testToken("t1", secretA, structs.ACLTokenManagement)}})
	st := h.f.State()
	if tok, _ := st.ACLTokenBySecret(nil, secretA); tok == nil || tok.AccessorID != "t1" {
		t.Fatalf("exp: t1 got: %+v", tok)
	}
	for _, s := range []string{"", secretB, secretA[:10], secretA + "x"} {
		if tok, _ := st.ACLTokenBySecret(nil, s); tok != nil {
			t.Fatalf("exp: no token for %q got: %s", s, tok.AccessorID)
		}
	}
}

func TestACLTokenUpsert_ServerTokenCreatedOnce(t *testing.T) {
	h := mustNewHarness(t)
	for _, secret := range []string{secretA, secretB} {
		h.apply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{
			IfAbsentType: structs.ACLTokenServer,
			Tokens:       []*structs.ACLToken{testToken("srv-"+secret[:4], secret, structs.ACLTokenServer)}})
	}
	srv := h.f.State().ServerToken()
	if srv == nil || srv.SecretID != secretA {
		t.Fatalf("exp: the first server token kept got: %+v", srv)
	}
	if err, _ := h.apply(structs.ACLTokenDeleteRequestType, &structs.ACLTokenDeleteRequest{AccessorIDs: []string{srv.AccessorID}}).(error); !errors.Is(err, structs.ErrNotFound) {
		t.Fatalf("exp: the server token cannot be deleted got: %v", err)
	}
}

func TestACLTables_SurviveSnapshotRestore(t *testing.T) {
	h := mustNewHarness(t)
	h.apply(structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{{Name: "ops", Rules: `volume { policy = "read" }`}}})
	h.apply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{testToken("t1", secretA, structs.ACLTokenClient, "ops")}})
	restored := New(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(mustSnapshotBytes(t, h.f)))); err != nil {
		t.Fatal(err)
	}
	if p, _ := restored.State().ACLPolicyByName(nil, "ops"); p == nil {
		t.Fatalf("exp: policy ops after restore got: nil")
	}
	if tok, _ := restored.State().ACLTokenBySecret(nil, secretA); tok == nil || tok.Policies[0] != "ops" {
		t.Fatalf("exp: token t1 after restore got: %+v", tok)
	}
}
