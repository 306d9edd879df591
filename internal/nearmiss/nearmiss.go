// Package nearmiss finds the name a person probably meant: a known name
// within a small edit distance of one that was given, for "did you mean"
// hints on misspelt config members, environment variables and file names.
package nearmiss

// MaxDistance is the largest edit distance at which a name counts as a
// near miss of another.
const MaxDistance = 2

// Distance is the Levenshtein distance between a and b, counted in bytes:
// the fewest insertions, deletions and substitutions that turn a into b.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Closest returns the candidate nearest to name, at a distance of 1 to
// MaxDistance, and whether there is one; ties go to the earlier candidate.
// A candidate equal to name is no near miss of it.
func Closest(name string, candidates []string) (string, bool) {
	best, bestD := "", MaxDistance+1
	for _, c := range candidates {
		if d := Distance(name, c); d > 0 && d < bestD {
			best, bestD = c, d
		}
	}
	return best, bestD <= MaxDistance
}
