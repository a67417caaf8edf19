package canary

import "fmt"

var (
	verdictNames   = []string{None: "NONE", Pass: "PASS", Fail: "FAIL"}
	directionNames = []string{Increase: "increase", Decrease: "decrease", Either: "either"}
	kindNames      = []string{KindAuto: "auto", KindCount: "count", KindProportion: "proportion", KindValue: "value"}
)

func name(names []string, i int, what string) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%s(%d)", what, i)
}

func parse(names []string, text []byte, what string) (int, error) {
	for i, n := range names {
		if n == string(text) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("unknown %s %q; want one of %q", what, text, names)
}

// String returns NONE, PASS or FAIL.
func (v Verdict) String() string { return name(verdictNames, int(v), "Verdict") }

// MarshalText encodes v as NONE, PASS or FAIL.
func (v Verdict) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText decodes NONE, PASS or FAIL.
func (v *Verdict) UnmarshalText(text []byte) error {
	i, err := parse(verdictNames, text, "verdict")
	if err != nil {
		return err
	}
	*v = Verdict(i)
	return nil
}

// String returns increase, decrease or either.
func (d Direction) String() string { return name(directionNames, int(d), "Direction") }

// MarshalText encodes d as increase, decrease or either.
func (d Direction) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText decodes increase, decrease or either.
func (d *Direction) UnmarshalText(text []byte) error {
	i, err := parse(directionNames, text, "direction")
	if err != nil {
		return err
	}
	*d = Direction(i)
	return nil
}

// String returns auto, count, proportion or value.
func (k Kind) String() string { return name(kindNames, int(k), "Kind") }

// MarshalText encodes k as auto, count, proportion or value.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText decodes auto, count, proportion or value.
func (k *Kind) UnmarshalText(text []byte) error {
	i, err := parse(kindNames, text, "kind")
	if err != nil {
		return err
	}
	*k = Kind(i)
	return nil
}
