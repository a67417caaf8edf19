package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"lehr.dev/lehr/client/producer"
)

func text(k, v string) producer.Property {
	return producer.Property{Key: k, Value: []byte(v), ContentType: ctText}
}

func jsonProp(k, v string) producer.Property {
	return producer.Property{Key: k, Value: []byte(v), ContentType: ctJSON}
}

// yamlBomb is the 342-byte "billion laughs": nine levels of nine aliases.
const yamlBomb = `a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
`

func TestParseProperties(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		format  fileFormat
		want    []producer.Property
		wantErr string // substring of the error; "" means success
	}{
		{
			name:   "json strings and values",
			in:     `{"greeting": "hello", "limits/rps": 100, "features": {"dark_mode": true, "list": [1, 2]}, "off": false, "none": null}`,
			format: formatJSON,
			want: []producer.Property{
				jsonProp("features", `{"dark_mode":true,"list":[1,2]}`),
				text("greeting", "hello"),
				jsonProp("limits/rps", "100"),
				jsonProp("none", "null"),
				jsonProp("off", "false"),
			},
		},
		{
			name:   "json numbers keep their spelling",
			in:     `{"a": 1.50, "b": 12345678901234567890, "c": -0.0e1}`,
			format: formatJSON,
			want:   []producer.Property{jsonProp("a", "1.50"), jsonProp("b", "12345678901234567890"), jsonProp("c", "-0.0e1")},
		},
		{
			name:   "json string escapes are decoded",
			in:     `{"s": "line1\nline2 \u00e9 \"q\""}`,
			format: formatJSON,
			want:   []producer.Property{text("s", "line1\nline2 é \"q\"")},
		},
		{
			name:   "empty object",
			in:     `{}`,
			format: formatJSON,
			want:   nil,
		},
		{
			name:   "yaml",
			in:     "greeting: hello\nlimits/rps: 100\nfeatures:\n  dark_mode: true\n  list: [a, b]\nquoted: \"42\"\n",
			format: formatYAML,
			want: []producer.Property{
				jsonProp("features", `{"dark_mode":true,"list":["a","b"]}`),
				text("greeting", "hello"),
				jsonProp("limits/rps", "100"),
				text("quoted", "42"),
			},
		},
		{
			name:   "sniff picks json",
			in:     `{"k": "v"}`,
			format: formatSniff,
			want:   []producer.Property{text("k", "v")},
		},
		{
			name:   "sniff falls back to yaml",
			in:     "k: v\nn: 3\n",
			format: formatSniff,
			want:   []producer.Property{text("k", "v"), jsonProp("n", "3")},
		},
		{name: "empty input", in: " \n", format: formatJSON, wantErr: "empty"},
		{name: "json top-level array", in: `[1, 2]`, format: formatJSON, wantErr: "top level is an array"},
		{name: "json top-level string", in: `"x"`, format: formatJSON, wantErr: "top level is a string"},
		{name: "json duplicate key", in: `{"a": 1, "a": 2}`, format: formatJSON, wantErr: `key "a" appears twice`},
		{name: "json trailing garbage", in: `{"a": 1} {"b": 2}`, format: formatJSON, wantErr: "data after"},
		{name: "json syntax error", in: `{"a": }`, format: formatJSON, wantErr: "invalid JSON"},
		{name: "json unterminated", in: `{"a": 1`, format: formatJSON, wantErr: "invalid JSON"},
		{
			name: "yaml keys and plain scalars are literal (YAML 1.2)",
			in: "n: 1\non: yes\nwhen: 2001-12-14\nhex: 0x1F\nbig: 1_000\nf: 1.5\nnothing: ~\n" +
				"nested:\n  y: n\n  list: [on, 2, true, null]\n  when: 2001-12-14\n",
			format: formatYAML,
			want: []producer.Property{
				jsonProp("big", "1000"),
				jsonProp("f", "1.5"),
				jsonProp("hex", "31"),
				jsonProp("n", "1"),
				jsonProp("nested", `{"y":"n","list":["on",2,true,null],"when":"2001-12-14"}`),
				jsonProp("nothing", "null"),
				text("on", "yes"),
				text("when", "2001-12-14"),
			},
		},
		{
			name:   "yaml anchors and block text",
			in:     "base: &b {rps: 10}\ncopy: *b\nmotd: |\n  line one\n  line two\n",
			format: formatYAML,
			want: []producer.Property{
				jsonProp("base", `{"rps":10}`),
				jsonProp("copy", `{"rps":10}`),
				text("motd", "line one\nline two\n"),
			},
		},
		{name: "yaml duplicate key", in: "a: 1\na: 2\n", format: formatYAML, wantErr: `key "a" appears twice (line 2)`},
		{name: "yaml nested duplicate key", in: "a:\n  b: 1\n  b: 2\n", format: formatYAML, wantErr: `value of key "a": key "b" appears twice`},
		{name: "yaml top-level list", in: "- a\n- b\n", format: formatYAML, wantErr: "top level is a list"},
		{name: "yaml top-level scalar", in: "hello\n", format: formatYAML, wantErr: "top level is a scalar (str)"},
		{name: "yaml two documents", in: "a: 1\n---\nb: 2\n", format: formatYAML, wantErr: "more than one document"},
		{name: "yaml infinity", in: "a: .inf\n", format: formatYAML, wantErr: `value of key "a": line 1: ".inf" has no JSON form`},
		{name: "yaml merge key", in: "base: &b {x: 1}\n<<: *b\n", format: formatYAML, wantErr: "merge keys (<<) are not supported"},
		{name: "yaml complex key", in: "? [a, b]\n: 1\n", format: formatYAML, wantErr: "a key must be a scalar"},
		{name: "yaml syntax error", in: "a: [1, 2\n", format: formatYAML, wantErr: "invalid YAML"},
		{name: "sniff neither", in: "a: [1, 2\n", format: formatSniff, wantErr: "neither valid JSON nor valid YAML"},
		// A 342-byte "billion laughs" made lehr push grow to 11.9 GB (issue
		// 8, defect 13); expansion is bounded.
		{name: "yaml alias bomb", in: yamlBomb, format: formatYAML, wantErr: "aliases expand to more than"},
		{name: "yaml deep nesting", in: "a: " + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + "\n", format: formatYAML, wantErr: "nested deeper than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProperties([]byte(tt.in), tt.format)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseProperties(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseProperties(%q) = %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseProperties(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestReadPropertiesFileFormats(t *testing.T) {
	dir := t.TempDir()
	// A .json file is parsed as JSON only: YAML in it is an error.
	bad := filepath.Join(dir, "app.json")
	if err := os.WriteFile(bad, []byte("k: v\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readPropertiesFile(bad, nil); err == nil || !strings.Contains(err.Error(), "app.json: invalid JSON") {
		t.Errorf("readPropertiesFile(yaml in .json) error = %v, want invalid JSON naming the file", err)
	}
	yml := filepath.Join(dir, "app.yml")
	if err := os.WriteFile(yml, []byte("k: v\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readPropertiesFile(yml, nil)
	if err != nil {
		t.Fatalf("readPropertiesFile(.yml) = %v", err)
	}
	if diff := cmp.Diff([]producer.Property{text("k", "v")}, got); diff != "" {
		t.Errorf("readPropertiesFile(.yml) mismatch (-want +got):\n%s", diff)
	}
	got, err = readPropertiesFile("-", strings.NewReader("n: 1\n"))
	if err != nil {
		t.Fatalf("readPropertiesFile(stdin) = %v", err)
	}
	if diff := cmp.Diff([]producer.Property{jsonProp("n", "1")}, got); diff != "" {
		t.Errorf("readPropertiesFile(stdin) mismatch (-want +got):\n%s", diff)
	}
	if _, err := readPropertiesFile(filepath.Join(dir, "missing.json"), nil); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("readPropertiesFile(missing) error = %v, want one naming the file", err)
	}
}

func TestPatchFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	jsonFile := write("rules.json", []byte(`{"a": 1}`))
	yamlFile := write("rules.yaml", []byte("a: 1\n"))
	txtFile := write("motd", []byte("hello\n"))
	binFile := write("blob", []byte{0xff, 0x00, 0xfe})

	tests := []struct {
		name    string
		pf      patchFlags
		want    producer.Patch
		wantErr string
	}{
		{
			name: "every kind of change",
			pf: patchFlags{
				set:     stringList{"greeting=hi there", "empty=", "eq=a=b"},
				setJSON: stringList{`limits/rps=250`, `features={ "x" : [1, 2] }`},
				setFile: stringList{"rules=@" + jsonFile, "y=@" + yamlFile, "motd=" + txtFile, "blob=@" + binFile},
				del:     stringList{"old", "older"},
			},
			want: producer.Patch{
				Set: []producer.Property{
					text("greeting", "hi there"),
					text("empty", ""),
					text("eq", "a=b"),
					jsonProp("limits/rps", "250"),
					jsonProp("features", `{"x":[1,2]}`),
					jsonProp("rules", `{"a": 1}`),
					{Key: "y", Value: []byte("a: 1\n"), ContentType: ctYAML},
					text("motd", "hello\n"),
					{Key: "blob", Value: []byte{0xff, 0x00, 0xfe}, ContentType: ctBin},
				},
				Delete: []string{"old", "older"},
			},
		},
		{name: "set without =", pf: patchFlags{set: stringList{"novalue"}}, wantErr: `--set "novalue": want KEY=VALUE`},
		{name: "set with empty key", pf: patchFlags{set: stringList{"=v"}}, wantErr: "want KEY=VALUE"},
		{name: "invalid json", pf: patchFlags{setJSON: stringList{"k={a:1}"}}, wantErr: "--set-json k: value is not valid JSON"},
		{name: "missing file", pf: patchFlags{setFile: stringList{"k=@" + filepath.Join(dir, "nope")}}, wantErr: "--set-file k:"},
		{name: "key twice", pf: patchFlags{set: stringList{"k=1"}, del: stringList{"k"}}, wantErr: `key "k" given twice (--set and --delete)`},
		{name: "key twice in set-json", pf: patchFlags{setJSON: stringList{"k=1", "k=2"}}, wantErr: `key "k" given twice (--set-json and --set-json)`},
		{name: "empty delete", pf: patchFlags{del: stringList{""}}, wantErr: "--delete: empty key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.pf.build()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("build() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("build() = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("build() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
