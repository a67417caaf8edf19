package content

import "testing"

func TestVersionRef(t *testing.T) {
	snap := mustNew(t, p("a", "1"))
	v := &Version{Namespace: "d/n", Seq: 7, Checksum: snap.Checksum(), Content: snap}
	if got, want := v.Ref(), (Ref{Seq: 7, Checksum: snap.Checksum()}); got != want {
		t.Errorf("Ref() = %v, want %v", got, want)
	}
	var none *Version
	if got := none.Ref(); got != (Ref{}) {
		t.Errorf("nil Version: Ref() = %v, want the zero Ref", got)
	}
}

func TestRefString(t *testing.T) {
	sum := "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		ref  Ref
		want string
	}{
		{Ref{}, "0 (no checksum)"},
		{Ref{Seq: 7, Checksum: sum}, "7 (sha256:0123456789ab…)"},
		{Ref{Seq: 3, Checksum: "sha256:ab"}, "3 (sha256:ab)"},
	} {
		if got := tc.ref.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.ref, got, tc.want)
		}
	}
}
