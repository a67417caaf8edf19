package policy

import (
	"reflect"
	"testing"
)

func TestMask(t *testing.T) {
	in := Input{
		Request:   map[string]any{"path": "/pay", "card": map[string]any{"number": "4111", "brand": "visa"}},
		Principal: map[string]any{"user": "ana", "token": "s3cret"},
	}
	tests := []struct {
		name      string
		sensitive []string
		want      map[string]any
	}{
		{name: "nothing", want: map[string]any{"request": in.Request, "principal": in.Principal}},
		{name: "top-level and nested", sensitive: []string{"principal.token", "request.card.number"},
			want: map[string]any{
				"request":   map[string]any{"path": "/pay", "card": map[string]any{"number": Masked, "brand": "visa"}},
				"principal": map[string]any{"user": "ana", "token": Masked},
			}},
		{name: "a whole map", sensitive: []string{"request.card"},
			want: map[string]any{"request": map[string]any{"path": "/pay", "card": Masked}, "principal": in.Principal}},
		{name: "absent paths mask nothing", sensitive: []string{"request.nope", "request.path.deeper", "principal.user.x"},
			want: map[string]any{"request": in.Request, "principal": in.Principal}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Mask(in, tt.sensitive)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Mask = %v, want %v", got, tt.want)
			}
		})
	}
	// The input is never modified.
	if in.Principal["token"] != "s3cret" || in.Request["card"].(map[string]any)["number"] != "4111" {
		t.Errorf("Mask modified its input: %v", in)
	}
}
