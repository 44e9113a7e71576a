package snapshot

// The sample state and archive, for the tests of package snapshot/inspect
// (inspect_test.go, package snapshot_test).
var (
	SampleState = sampleState
	SampleMeta  = sampleMeta
	MustArchive = mustArchive
)
