package rollout

import "testing"

func TestWitnessesNote(t *testing.T) {
	for _, tc := range []struct {
		w    witnesses
		want string
	}{
		{witnesses{}, ""},
		{witnesses{"zone-a/d1": true}, "; on the word of distributor zone-a/d1"},
		{witnesses{"zone-b/d2": true, "zone-a/d1": true}, "; on the word of distributors zone-a/d1, zone-b/d2"},
		{witnesses{"a/1": true, "a/2": true, "a/3": true, "a/4": true, "a/5": true, "a/6": true, "b/1": true},
			"; on the word of distributors a/1, a/2, a/3, a/4, a/5 and 2 more"},
	} {
		if got := tc.w.note(); got != tc.want {
			t.Errorf("%v.note() = %q, want %q", tc.w, got, tc.want)
		}
	}
	w := witnesses{}
	w.add("zone-a", "d1")
	w.add("zone-a", "d1")
	if len(w) != 1 || !w["zone-a/d1"] {
		t.Errorf("after adding zone-a/d1 twice: %v", w)
	}
	if got := orNoHost(""); got != "no host named" {
		t.Errorf("orNoHost(\"\") = %q", got)
	}
	if got := orNoHost("a/h1"); got != "a/h1" {
		t.Errorf("orNoHost(a/h1) = %q", got)
	}
}
