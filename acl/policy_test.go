package acl

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func mustParse(t *testing.T, name, src string) *Policy {
	t.Helper()
	p, err := Parse(name, []byte(src))
	if err != nil {
		t.Fatalf("Parse(%q): exp: no error got: %v", name, err)
	}
	return p
}

func TestParse_HCLAndJSONOfTheSamePolicyAreEqual(t *testing.T) {
	cases := []struct {
		name     string
		hcl      string
		json     string
		expRules map[Resource]Rule
	}{
		{
			name: "every block",
			hcl: `
# Volumes: read, register, deregister, detach, claim, create, delete
volume {
  policy       = "read"
  capabilities = ["detach"]
}
alloc    { policy = "write" }
node     { policy = "read" }
plugin   { policy = "read" }
operator { policy = "deny" }
`,
			json: `{
  "volume":   {"policy": "read", "capabilities": ["detach"]},
  "alloc":    {"policy": "write"},
  "node":     {"policy": "read"},
  "plugin":   {"policy": "read"},
  "operator": {"policy": "deny"}
}`,
			expRules: map[Resource]Rule{
				Volume:   {Policy: PolicyRead, Capabilities: []Capability{Detach}},
				Alloc:    {Policy: PolicyWrite},
				Node:     {Policy: PolicyRead},
				Plugin:   {Policy: PolicyRead},
				Operator: {Policy: PolicyDeny},
			},
		},
		{
			name: "capabilities only, in canonical order without repeats",
			hcl:  `volume { capabilities = ["delete", "claim", "claim", "read"] }`,
			json: `{"volume": {"capabilities": ["delete", "claim", "claim", "read"]}}`,
			expRules: map[Resource]Rule{
				Volume: {Capabilities: []Capability{Read, Claim, Delete}},
			},
		},
		{
			name:     "write is a capability of node",
			hcl:      `node { capabilities = ["write"] }`,
			json:     `{"node": {"capabilities": ["write"]}}`,
			expRules: map[Resource]Rule{Node: {Capabilities: []Capability{Write}}},
		},
		{
			name:     "an empty capability list grants nothing but is set",
			hcl:      `plugin { capabilities = [] }`,
			json:     `{"plugin": {"capabilities": []}}`,
			expRules: map[Resource]Rule{Plugin: {}},
		},
		{
			name:     "empty",
			hcl:      "\n  # nothing granted\n",
			json:     "  \n{}",
			expRules: map[Resource]Rule{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fromHCL := mustParse(t, "policy.hcl", tc.hcl)
			fromJSON := mustParse(t, "policy.json", tc.json)
			if !reflect.DeepEqual(fromHCL.Rules, tc.expRules) {
				t.Fatalf("HCL: exp: %+v got: %+v", tc.expRules, fromHCL.Rules)
			}
			if !reflect.DeepEqual(fromJSON, fromHCL) {
				t.Fatalf("JSON: exp: %+v got: %+v", fromHCL.Rules, fromJSON.Rules)
			}
		})
	}
}

func TestParse_EmptySourceIsAPolicyThatGrantsNothing(t *testing.T) {
	p := mustParse(t, "empty", "")
	if p.Rules == nil || len(p.Rules) != 0 {
		t.Fatalf("exp: empty non-nil rules got: %#v", p.Rules)
	}
	a := New(p)
	for _, r := range Resources() {
		for _, c := range Capabilities(r) {
			if a.Allow(r, c) {
				t.Fatalf("exp: %s:%s denied got: allowed", r, c)
			}
		}
	}
}

// Every refusal names the source, the line (and columns) and the bad word,
// so the writer can find it without guessing.
func TestParse_RefusalsNameTheSourceLineAndBadWord(t *testing.T) {
	cases := []struct {
		name string
		src  string
		exp  []string // substrings of the error
	}{
		{
			name: "misspelt capability",
			src:  "# ops\nvolume {\n  policy       = \"read\"\n  capabilities = [\"detatch\"]\n}\n",
			exp:  []string{`policy.hcl:4,19-28: unknown volume capability "detatch" (one of read, register, deregister, detach, claim, create, delete)`},
		},
		{
			name: "capability of another resource",
			src:  "\nvolume {\n  capabilities = [\"read\", \"place\"]\n}\n",
			exp:  []string{`policy.hcl:3,27-34: unknown volume capability "place"`},
		},
		{
			name: "write is not a volume capability",
			src:  "volume { capabilities = [\"write\"] }",
			exp:  []string{`policy.hcl:1,26-33: unknown volume capability "write"`},
		},
		{
			name: "unknown block",
			src:  "node { policy = \"read\" }\nvolumes {\n  policy = \"read\"\n}\n",
			exp:  []string{`policy.hcl:2,1-8: unknown block "volumes" (one of volume, alloc, node, plugin, operator)`},
		},
		{
			name: "unknown attribute",
			src:  "alloc {\n  polcy = \"read\"\n}\n",
			exp:  []string{`policy.hcl:2,3-8: unknown alloc attribute "polcy" (one of policy, capabilities)`},
		},
		{
			name: "duplicate block",
			src:  "volume { policy = \"read\" }\nnode { policy = \"read\" }\nvolume { policy = \"write\" }\n",
			exp:  []string{`policy.hcl:3,1-7: duplicate volume block (the first is at line 1)`},
		},
		{
			name: "bad policy value",
			src:  "plugin {\n  policy = \"reed\"\n}\n",
			exp:  []string{`policy.hcl:2,12-18: unknown plugin policy "reed" (one of deny, read, write)`},
		},
		{
			name: "unquoted policy value",
			src:  "plugin {\n  policy = read\n}\n",
			exp:  []string{`policy.hcl:2,12-16: policy must be a quoted string, as in "read"`},
		},
		{
			name: "empty block",
			src:  "\n\nvolume {\n}\n",
			exp:  []string{`policy.hcl: volume block at line 3: set policy or capabilities`},
		},
		{
			name: "block written as an attribute",
			src:  "operator = \"read\"\n",
			exp:  []string{`policy.hcl:1,1-9: operator must be a block`},
		},
		{
			name: "capabilities beside deny",
			src:  "volume {\n  policy = \"deny\"\n  capabilities = [\"read\"]\n}\n",
			exp:  []string{`policy.hcl:3,3-15: volume block sets capabilities with policy "deny"`},
		},
		{
			name: "capabilities not a list",
			src:  "volume {\n  capabilities = \"detach\"\n}\n",
			exp:  []string{`policy.hcl:2,18-26: capabilities must be a list of quoted names, as in ["read"]`},
		},
		{
			name: "syntax error",
			src:  "volume {\n  policy = \n}\n",
			exp:  []string{`policy.hcl:2,12-3,1: Invalid expression`},
		},
		{
			name: "JSON misspelt capability",
			src:  "{\n  \"volume\": {\n    \"capabilities\": [\"detatch\"]\n  }\n}",
			exp:  []string{`policy.hcl:3,22-31: unknown volume capability "detatch"`},
		},
		{
			name: "JSON unknown block",
			src:  "{\n  \"volumes\": {\"policy\": \"read\"}\n}",
			exp:  []string{`policy.hcl:2,3-12: unknown block "volumes"`},
		},
		{
			name: "JSON unknown attribute",
			src:  "{\"operator\": {\n  \"policy\": \"write\",\n  \"extra\": 1\n}}",
			exp:  []string{`policy.hcl:3,3-10: unknown operator attribute "extra"`},
		},
		{
			name: "JSON duplicate block",
			src:  "{\n  \"node\": {\"policy\": \"read\"},\n  \"node\": {\"policy\": \"write\"}\n}",
			exp:  []string{`policy.hcl:3,3-9: duplicate node block (the first is at line 2)`},
		},
		{
			name: "JSON bad policy value",
			src:  "{\"alloc\": {\n  \"policy\": \"all\"}}",
			exp:  []string{`policy.hcl:2,13-18: unknown alloc policy "all"`},
		},
		{
			name: "JSON empty block",
			src:  "{\n\"alloc\": {}}",
			exp:  []string{`policy.hcl: alloc block at line 2: set policy or capabilities`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse("policy.hcl", []byte(tc.src))
			if err == nil {
				t.Fatalf("exp: error got: policy %+v", p.Rules)
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("exp: errors.Is(err, ErrInvalidPolicy) got: %T %v", err, err)
			}
			for _, want := range tc.exp {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("exp: error containing %q got: %v", want, err)
				}
			}
		})
	}
}

func TestParse_ReportsEveryProblemInSourceOrder(t *testing.T) {
	src := `volume {
  capabilities = ["detatch"]
}
volumes { policy = "read" }
alloc { policy = "reed" }
volume { policy = "read" }
`
	_, err := Parse("ops", []byte(src))
	var pe *PolicyError
	if !errors.As(err, &pe) {
		t.Fatalf("exp: *PolicyError got: %T %v", err, err)
	}
	exp := []string{
		`ops:2,19-28: unknown volume capability "detatch"`,
		`ops:4,1-8: unknown block "volumes"`,
		`ops:5,18-24: unknown alloc policy "reed"`,
		`ops:6,1-7: duplicate volume block (the first is at line 1)`,
	}
	if len(pe.Problems) != len(exp) {
		t.Fatalf("exp: %d problems got: %d: %q", len(exp), len(pe.Problems), pe.Problems)
	}
	for i, want := range exp {
		if !strings.HasPrefix(pe.Problems[i], want) {
			t.Fatalf("problem %d: exp: prefix %q got: %q", i, want, pe.Problems[i])
		}
	}
}

func TestParse_RefusesSourceOver64KiB(t *testing.T) {
	line := "# padding padding padding padding padding padding padding padding\n"
	body := `volume { policy = "read" }` + "\n"
	fits := strings.Repeat(line, (MaxPolicySize-len(body))/len(line)) + body
	if len(fits) > MaxPolicySize {
		t.Fatalf("test setup: %d bytes", len(fits))
	}
	mustParse(t, "big.hcl", fits)

	over := fits + strings.Repeat("#", MaxPolicySize-len(fits)+1)
	_, err := Parse("big.hcl", []byte(over))
	if err == nil || !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("exp: ErrInvalidPolicy got: %v", err)
	}
	for _, want := range []string{"big.hcl", "65537 bytes", "64 KiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("exp: error containing %q got: %v", want, err)
		}
	}
}

func TestParse_NameAppearsInEveryMessage(t *testing.T) {
	_, err := Parse(`policy "ops"`, []byte(`node { policy = "all" }`))
	if err == nil || !strings.HasPrefix(err.Error(), `policy "ops":1,`) {
		t.Fatalf("exp: error starting %q got: %v", `policy "ops":1,`, err)
	}
}
