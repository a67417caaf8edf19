package jsonyaml

import (
	"strings"
	"testing"
)

func TestFormatOf(t *testing.T) {
	for mt, want := range map[string]Format{
		"application/json": JSON, "application/vnd.x+json": JSON,
		"application/yaml": YAML, "application/x-yaml": YAML, "text/yaml": YAML, "application/vnd.x+yaml": YAML,
		"text/plain": Text, "application/octet-stream": Opaque, "": Opaque,
	} {
		if got := FormatOf(mt); got != want {
			t.Errorf("FormatOf(%q) = %v, want %v", mt, got, want)
		}
	}
}

func TestToJSON(t *testing.T) {
	tests := []struct {
		f       Format
		in      string
		want    string // JSON out; "" for none
		wantErr string // substring
	}{
		{f: JSON, in: `{"a": 1}`, want: `{"a": 1}`},
		{f: JSON, in: "{\n  \"a\": 1,\n}", wantErr: "invalid JSON at line 3, column 1"},
		{f: JSON, in: "\xff", wantErr: "invalid UTF-8 at byte offset 0"},
		{f: YAML, in: "a: 1\nb: [x, z]\n", want: `{"a":1,"b":["x","z"]}`},
		{f: YAML, in: "a: 1\na: 2\n", wantErr: "no duplicate keys"},
		{f: Text, in: "hello"},
		{f: Text, in: "bad \xff", wantErr: "text/* values must be valid UTF-8"},
		{f: Opaque, in: "\x00\xff"},
	}
	for _, tt := range tests {
		got, err := ToJSON(tt.f, []byte(tt.in))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ToJSON(%v, %q) error = %v, want one containing %q", tt.f, tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("ToJSON(%v, %q) = %q, %v; want %q", tt.f, tt.in, got, err, tt.want)
		}
	}
}

// Control and the CLI read YAML the same way (1.2: "y", "on" and "no" are
// strings), and within bounds: a 342-byte alias bomb or a deeply nested
// document is refused at once (issue 8, defect 13).
func TestYAMLToJSONSemanticsAndBounds(t *testing.T) {
	got, err := YAMLToJSON([]byte("a: y\nb: [on, no, 1, true, null]\nc: {z: 1, a: 2}\n"))
	if err != nil || string(got) != `{"a":"y","b":["on","no",1,true,null],"c":{"z":1,"a":2}}` {
		t.Errorf("YAMLToJSON = %s, %v", got, err)
	}
	bomb := "a: &a [x,x,x,x,x,x,x,x,x]\n"
	for i, prev := 1, "a"; i < 9; i++ {
		name := string(rune('a' + i))
		bomb += name + ": &" + name + " [" + strings.Repeat("*"+prev+",", 8) + "*" + prev + "]\n"
		prev = name
	}
	if _, err := YAMLToJSON([]byte(bomb)); err == nil || !strings.Contains(err.Error(), "aliases expand to more than") {
		t.Errorf("alias bomb: %v, want the expansion bound", err)
	}
	deep := "a: " + strings.Repeat("[", MaxYAMLDepth+10) + strings.Repeat("]", MaxYAMLDepth+10)
	if _, err := YAMLToJSON([]byte(deep)); err == nil || !strings.Contains(err.Error(), "nested deeper than") {
		t.Errorf("deep nesting: %v, want the depth bound", err)
	}
	if got, err := YAMLToJSON(nil); err != nil || string(got) != "null" {
		t.Errorf("empty document = %s, %v; want null", got, err)
	}
}
