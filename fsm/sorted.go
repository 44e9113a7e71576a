package fsm

import "slices"

// sortedUnique returns ids sorted without duplicates, for loops whose
// order reaches the state (eval creation, error messages).
func sortedUnique(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}
