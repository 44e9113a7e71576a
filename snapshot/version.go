package snapshot

import "github.com/claimd/claimd/version"

// ClaimdVersion is this binary's version and commit (package version), as
// an archive's metadata records it.
func ClaimdVersion() string { return version.Short() }
