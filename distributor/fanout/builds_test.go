package fanout

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/proto/lehrpb"
)

func TestAgentBuild(t *testing.T) {
	long := strings.Repeat("b", MaxBuildLen-1) + "é" // the cut falls inside é
	for _, tt := range []struct{ in, want string }{
		{"", "unknown"},
		{"dev", "unknown"}, // what agents before announced builds sent
		{"0.1.0+237c09b1a2b3", "0.1.0+237c09b1a2b3"},
		{strings.Repeat("x", 100), strings.Repeat("x", MaxBuildLen)},
		{long, strings.Repeat("b", MaxBuildLen-1)},
	} {
		got := agentBuild(tt.in)
		if got != tt.want || len(got) > MaxBuildLen || !utf8.ValidString(got) {
			t.Errorf("agentBuild(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Beyond MaxBuilds, the agents of the rarest builds are summed under
// OtherBuild, and the report stays sorted by build.
func TestAgentBuildsAreBounded(t *testing.T) {
	s := &Server{sessions: map[string]*session{}}
	add := func(build string, n int) {
		for i := range n {
			host := fmt.Sprintf("%s-%d", build, i)
			s.sessions[host] = &session{host: host, build: build}
		}
	}
	add("0.1.0", 10)
	add("0.2.0", 5)
	add(OtherBuild, 1) // an agent that calls its build "other"
	for i := range MaxBuilds {
		add(fmt.Sprintf("rare-%02d", i), 1)
	}
	got := s.AgentBuilds()
	if len(got) != MaxBuilds {
		t.Fatalf("%d builds reported, want MaxBuilds (%d)", len(got), MaxBuilds)
	}
	// 0.1.0, 0.2.0 and the first 61 rare ones (ties keep build order)
	// stay; 3 rare ones and the agent calling itself "other" are summed.
	want := []*lehrpb.BuildCount{{Build: "0.1.0", Count: 10}, {Build: "0.2.0", Count: 5}, {Build: OtherBuild, Count: 4}}
	if diff := cmp.Diff(want, got[:3], protocmp.Transform()); diff != "" {
		t.Errorf("AgentBuilds()[:3] (-want +got):\n%s", diff)
	}
	total := int32(0)
	for i, c := range got {
		total += c.GetCount()
		if i > 0 && got[i-1].GetBuild() >= c.GetBuild() {
			t.Errorf("AgentBuilds not sorted by build: %q before %q", got[i-1].GetBuild(), c.GetBuild())
		}
	}
	if total != int32(len(s.sessions)) {
		t.Errorf("AgentBuilds counts %d agents, want all %d", total, len(s.sessions))
	}
}
