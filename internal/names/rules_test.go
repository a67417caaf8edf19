package names

import (
	"regexp"
	"strings"
	"testing"
)

// The grammar's rules agree with the regular expressions of the package
// comment's grammar, on every string of up to three bytes over an
// alphabet of each class's edges and outsiders, and on strings at and
// around each length bound.
func TestRulesMatchTheGrammar(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule matcher
		re   *regexp.Regexp
	}{
		{"label", labelRE, regexp.MustCompile(`^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)},
		{"name", nameRE, regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$`)},
		{"segment", segmentRE, regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)},
		{"service", serviceRE, regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alphabet := []string{"a", "z", "0", "9", "A", "Z", "-", ".", "_", "/", " ", "\n", "`", "{", "@", "[", "\xc3\xa9", "\x00"}
			strs := []string{""}
			for range 3 {
				next := strs
				for _, s := range strs {
					for _, c := range alphabet {
						next = append(next, s+c)
					}
				}
				strs = next
			}
			for _, n := range []int{61, 62, 63, 64, 126, 127, 128, 129, 300} {
				for _, fill := range []string{"a", "-", "."} {
					strs = append(strs, strings.Repeat("a", n), "a"+strings.Repeat(fill, n-2)+"a", "a"+strings.Repeat(fill, n-1))
				}
			}
			for _, s := range strs {
				if got, want := tc.rule.MatchString(s), tc.re.MatchString(s); got != want {
					t.Errorf("%s rule on %q = %v; the grammar's regexp says %v", tc.name, s, got, want)
				}
			}
		})
	}
}

func BenchmarkNamespace(b *testing.B) {
	for b.Loop() {
		if _, _, err := Namespace("payments/fraud-rules.v2"); err != nil {
			b.Fatal(err)
		}
	}
}
