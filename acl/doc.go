// Package acl holds the ACL policy language, its parser, and the compiled
// ACL that endpoints check. It is pure: it parses bytes and answers
// questions, with no I/O, network or state store, so the server can build
// ACLs wherever it resolves tokens and tests can check every rule here.
//
// A policy has one block per resource (volume, alloc, node, plugin,
// operator), in HCL or JSON:
//
//	volume {
//	  policy       = "read"     # deny | read | write
//	  capabilities = ["detach"] # added to what the policy grants
//	}
//
// Why it is shaped this way:
//
//   - Parsing is strict. An unknown block, attribute, policy value or
//     capability is refused with its position and the valid words, never
//     ignored: in an ACL a typo that is silently dropped grants or denies
//     something the writer did not mean, and nobody notices until it
//     matters.
//   - Deny wins. A token's ACL is the union of its policies' grants, minus
//     every resource any of them denies, so a resource can be taken away
//     from many tokens by one policy, without editing the policies that
//     grant it. The order of a token's policies never matters.
//   - A nil *ACL means ACLs are disabled and allows everything. Endpoints
//     call Allow without first asking whether ACLs are on; the one place
//     that decides is the code that hands out the ACL.
//   - One table (resources, in resource.go) says which capabilities each
//     resource has. Parsing, granting, error messages and the endpoints'
//     authorization tests all read it, so they cannot disagree.
package acl
