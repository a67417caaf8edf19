package policy

import (
	"maps"
	"strings"
)

// Masked replaces a sensitive value in what Mask returns.
const Masked = "[masked]"

// Mask returns the request and principal of in as one document for a
// decision log — {"request": {...}, "principal": {...}} — with the value at
// every path in sensitive (Rule.Sensitive's grammar) replaced by Masked.
// in is not modified: every map on a masked path is copied. A path that
// does not exist in the input masks nothing.
func Mask(in Input, sensitive []string) map[string]any {
	doc := map[string]any{"request": orEmpty(in.Request), "principal": orEmpty(in.Principal)}
	for _, p := range sensitive {
		if m, ok := maskPath(doc, strings.Split(p, ".")); ok {
			doc = m
		}
	}
	return doc
}

// maskPath returns a copy of m with the value at keys masked, copying every
// map below it on the way, and true; or false when the path is absent.
func maskPath(m map[string]any, keys []string) (map[string]any, bool) {
	v, ok := m[keys[0]]
	if !ok {
		return nil, false
	}
	var nv any = Masked
	if len(keys) > 1 {
		sub, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if nv, ok = maskPath(sub, keys[1:]); !ok {
			return nil, false
		}
	}
	out := maps.Clone(m)
	out[keys[0]] = nv
	return out, true
}
