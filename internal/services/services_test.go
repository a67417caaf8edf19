package services

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"lehr.dev/lehr/proto/lehrpb"
)

func TestTop(t *testing.T) {
	sc := func(s string, n uint32) *lehrpb.ServiceConsumers {
		return &lehrpb.ServiceConsumers{Service: s, Consumers: n}
	}
	many := map[string]int{}
	var wantMany []*lehrpb.ServiceConsumers
	for i := range Max + 4 {
		name := fmt.Sprintf("s%02d", i)
		many[name] = 100 - i
		if i < Max {
			wantMany = append(wantMany, sc(name, uint32(100-i)))
		}
	}
	for _, tc := range []struct {
		name string
		in   map[string]int
		want []*lehrpb.ServiceConsumers
	}{
		{"none", nil, nil},
		{"most first, then by name", map[string]int{"web": 1, "api": 3, "batch": 1}, []*lehrpb.ServiceConsumers{sc("api", 3), sc("batch", 1), sc("web", 1)}},
		{"at most Max", many, wantMany},
	} {
		got := Top(tc.in)
		if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s: Top (-want +got):\n%s", tc.name, diff)
		}
		if err := Validate("services", got, 10_000); err != nil {
			t.Errorf("%s: Validate(Top(...)) = %v", tc.name, err)
		}
	}
}
