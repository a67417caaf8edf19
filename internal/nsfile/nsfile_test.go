package nsfile

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

func mustSnap(t testing.TB, props ...content.Property) content.Snapshot {
	t.Helper()
	s, err := content.New(props)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sample is the file in testdata/sample.lehr; docs/files.md and the Python
// reader use it. Its content is the second checksum test vector of package
// content.
func sample(t testing.TB) File {
	return File{
		Namespace:  "payments/fraud-rules",
		Version:    7,
		Kind:       lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG,
		Author:     "alice@example.com",
		Message:    "raise the limit",
		CreateTime: time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC),
		Content: mustSnap(t,
			content.Property{Key: "limits/rps", ContentType: "application/json", Value: []byte(`{"rps":100}`)},
			content.Property{Key: "banner", Value: []byte("hello")},
		),
	}
}

func encodeBytes(t testing.TB, f File) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Encode(&b, f); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return b.Bytes()
}

// fileCmp compares Files; snapshots compare by properties.
var fileCmp = cmp.Options{
	cmp.Comparer(func(a, b content.Snapshot) bool { return a.Equal(b) }),
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	binary := make([]byte, 4096)
	for i := range binary {
		binary[i] = byte(i)
	}
	big := make([]content.Property, 0, 40)
	for i := range 40 { // 40 × 256 KiB = 10 MiB of random bytes
		v := make([]byte, 256<<10)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		big = append(big, content.Property{Key: fmt.Sprintf("blob/%03d", i), ContentType: "application/octet-stream", Value: v})
	}
	tests := []struct {
		name string
		f    File
	}{
		{"empty", File{Namespace: "a/b", Version: 1}},
		{"sample", sample(t)},
		{"binary values", File{Namespace: "d/bin.ary", Version: 1 << 40, Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY,
			Content: mustSnap(t,
				content.Property{Key: "all-bytes", Value: binary},
				content.Property{Key: "newlines", Value: []byte("\n\n\r\x00LEHR1\n")},
				content.Property{Key: "empty", Value: []byte{}},
			)}},
		{"10 MiB", File{Namespace: "big/ns", Version: 3, Content: mustSnap(t, big...)}},
		{"rollback", File{Namespace: "a/b", Version: 7, RollbackOf: 5, Author: "rollout", Message: "canary failed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := Write(dir, tt.f); err != nil {
				t.Fatalf("Write: %v", err)
			}
			path, err := Path(dir, tt.f.Namespace)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Read(path)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			want := tt.f
			want.Checksum = tt.f.Content.Checksum()
			if diff := cmp.Diff(want, got, fileCmp); diff != "" {
				t.Errorf("Read after Write (-want +got):\n%s", diff)
			}
			entries, _ := os.ReadDir(filepath.Dir(path))
			if len(entries) != 1 {
				t.Errorf("directory holds %d entries, want only the file: %v", len(entries), entries)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			// Configuration holds secrets: the agent's user and group read
			// it, nobody else (a defect of the first cut wrote 0644).
			if fi.Mode().Perm() != 0o640 {
				t.Errorf("file mode %v, want 0640", fi.Mode().Perm())
			}
			if di, err := os.Stat(filepath.Dir(path)); err != nil || di.Mode().Perm() != 0o750 {
				t.Errorf("directory mode %v (%v), want 0750", di.Mode().Perm(), err)
			}
		})
	}
}

func TestGolden(t *testing.T) {
	got := encodeBytes(t, sample(t))
	golden := filepath.Join("testdata", "sample.lehr")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("read golden file (run go test -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Encode(sample) differs from %s (format changed? run with -update and review):\ngot  %q\nwant %q", golden, got, want)
	}
	f, err := Read(golden)
	if err != nil {
		t.Fatalf("Read(%s): %v", golden, err)
	}
	// The checksum is the test vector of package content.
	if want := "sha256:d0c84af8326c52a0a1cd1a8a54ff0e444926ab4cb8494edc4bf5ccd80e31572f"; f.Checksum != want {
		t.Errorf("golden checksum = %s, want %s", f.Checksum, want)
	}
}

// TestPythonReader runs the reader from docs/files.md against the golden
// file, so the documentation cannot drift from the format.
func TestPythonReader(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH")
	}
	script := filepath.Join("..", "..", "docs", "lehr_read.py")
	out, err := exec.Command(py, script, filepath.Join("testdata", "sample.lehr")).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	want := `payments/fraud-rules version 7 (config) sha256:d0c84af8326c52a0a1cd1a8a54ff0e444926ab4cb8494edc4bf5ccd80e31572f, 2 properties
banner  5 bytes
limits/rps application/json 11 bytes
`
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("python reader output (-want +got):\n%s", diff)
	}

	// And it refuses a damaged file.
	data := encodeBytes(t, sample(t))
	data[len(data)-TrailerLen-3] ^= 1 // inside the last value
	bad := filepath.Join(t.TempDir(), "bad.lehr")
	if err := os.WriteFile(bad, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(py, script, bad).CombinedOutput(); err == nil {
		t.Errorf("python reader accepted a corrupt file:\n%s", out)
	}
}

// TestDocsShowTheTestedReader checks that the Python code in docs/files.md
// is the script TestPythonReader runs.
func TestDocsShowTheTestedReader(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "files.md"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join("..", "..", "docs", "lehr_read.py"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```python\n")
	block, _, ok2 := strings.Cut(block, "```\n")
	if !ok || !ok2 {
		t.Fatal("docs/files.md has no ```python block")
	}
	if !strings.Contains(string(script), block) {
		t.Errorf("the Python reader in docs/files.md is not part of docs/lehr_read.py; keep them identical:\n%s", block)
	}
}

// TestEveryByteFlipDetected flips each bit-position of every byte of a file
// (one at a time) and expects an error, never a panic or a silent success.
func TestEveryByteFlipDetected(t *testing.T) {
	data := encodeBytes(t, sample(t))
	headerEnd := bytes.IndexByte(data, '\n') + 1
	headerEnd += bytes.IndexByte(data[headerEnd:], '\n') + 1
	for i := range data {
		for _, mask := range []byte{0x01, 0x80} {
			mut := bytes.Clone(data)
			mut[i] ^= mask
			_, err := Decode(bytes.NewReader(mut))
			if err == nil {
				t.Fatalf("flip %#x at byte %d of %d: Decode succeeded", mask, i, len(data))
			}
			if i >= headerEnd && !errors.Is(err, ErrCorrupt) {
				t.Errorf("flip at body/trailer byte %d: err = %v, want ErrCorrupt", i, err)
			}
			if i < len(Magic) && !errors.Is(err, ErrNotLehrFile) {
				t.Errorf("flip at magic byte %d: err = %v, want ErrNotLehrFile", i, err)
			}
		}
	}
}

// TestContentChecksumVerified writes a file whose trailer is right but whose
// header states a wrong content checksum: only the content check catches it.
func TestContentChecksumVerified(t *testing.T) {
	data := encodeBytes(t, sample(t))
	good := sample(t).Content.Checksum()
	wrong := "sha256:" + strings.Repeat("0", 64)
	data = bytes.Replace(data, []byte(good), []byte(wrong), 1)
	data = fixTrailer(data)
	_, err := Decode(bytes.NewReader(data))
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "checksum mismatch") {
		t.Fatalf("Decode with wrong content checksum: err = %v, want a content checksum mismatch", err)
	}
}

// fixTrailer recomputes the trailer of a file edited by a test.
func fixTrailer(data []byte) []byte {
	payload := data[:len(data)-TrailerLen]
	h := sha256.New()
	h.Write(payload)
	return append(bytes.Clone(payload), trailer(h)...)
}

func TestTruncatedAtEveryLength(t *testing.T) {
	data := encodeBytes(t, sample(t))
	for n := range len(data) {
		_, err := Decode(bytes.NewReader(data[:n]))
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("Decode(first %d of %d bytes): err = %v, want ErrCorrupt", n, len(data), err)
		}
	}
	if _, err := Decode(bytes.NewReader(append(bytes.Clone(data), 'x'))); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Decode with a trailing byte: err = %v, want ErrCorrupt", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	head := func(json string, body string) []byte {
		data := []byte(Magic + json + "\n" + body + strings.Repeat("x", TrailerLen))
		return fixTrailer(data)
	}
	sum := content.Snapshot{}.Checksum()
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"not lehr", []byte("hello world\n"), ErrNotLehrFile},
		{"json file", []byte(`{"namespace":"a/b"}`), ErrNotLehrFile},
		{"header not json", head("nope", ""), ErrCorrupt},
		{"bad namespace", head(`{"namespace":"../etc","kind":"config","checksum":"`+sum+`"}`, ""), ErrCorrupt},
		{"bad kind", head(`{"namespace":"a/b","kind":"yaml","checksum":"`+sum+`"}`, ""), ErrCorrupt},
		{"bad checksum form", head(`{"namespace":"a/b","kind":"config","checksum":"md5:00"}`, ""), ErrCorrupt},
		{"absurd body size", head(`{"namespace":"a/b","kind":"config","checksum":"`+sum+`","body_size":1099511627776}`, ""), ErrCorrupt},
		{"negative body size", head(`{"namespace":"a/b","kind":"config","checksum":"`+sum+`","body_size":-1}`, ""), ErrCorrupt},
		{"count too large for body", head(`{"namespace":"a/b","kind":"config","checksum":"`+sum+`","count":5,"body_size":8}`, "\x01a\x00\x00\x01b\x00\x00"), ErrCorrupt},
		{"length beyond body", head(`{"namespace":"a/b","kind":"config","checksum":"`+sum+`","count":1,"body_size":4}`, "\x01a\x00\x7f"), ErrCorrupt},
		{"bad key", head(`{"namespace":"a/b","kind":"config","checksum":"`+sum+`","count":1,"body_size":5}`, "\x02..\x00\x00"), ErrCorrupt},
		{"keys out of order", head(`{"namespace":"a/b","kind":"config","checksum":"`+sum+`","count":2,"body_size":8}`, "\x01b\x00\x00\x01a\x00\x00"), ErrCorrupt},
		{"duplicate keys", head(`{"namespace":"a/b","kind":"config","checksum":"`+sum+`","count":2,"body_size":8}`, "\x01a\x00\x00\x01a\x00\x00"), ErrCorrupt},
		{"leftover body", head(`{"namespace":"a/b","kind":"config","checksum":"`+sum+`","count":0,"body_size":4}`, "\x01a\x00\x00"), ErrCorrupt},
		{"huge header", []byte(Magic + strings.Repeat(" ", MaxHeaderBytes+10)), ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(bytes.NewReader(tt.data))
			if !errors.Is(err, tt.want) {
				t.Errorf("Decode: err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestWriteRejects(t *testing.T) {
	dir := t.TempDir()
	good := sample(t)
	tests := []struct {
		name   string
		mutate func(*File)
	}{
		{"traversal namespace", func(f *File) { f.Namespace = "../../etc/passwd" }},
		{"dot name", func(f *File) { f.Namespace = "a/.." }},
		{"absolute", func(f *File) { f.Namespace = "/etc/x" }},
		{"three parts", func(f *File) { f.Namespace = "a/b/c" }},
		{"empty", func(f *File) { f.Namespace = "" }},
		{"wrong checksum", func(f *File) { f.Checksum = "sha256:" + strings.Repeat("0", 64) }},
		{"bad key", func(f *File) { f.Content = mustSnap(t, content.Property{Key: "../x"}) }},
		{"unknown kind", func(f *File) { f.Kind = 42 }},
		{"long message", func(f *File) { f.Message = strings.Repeat("m", MaxHeaderBytes) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := good
			tt.mutate(&f)
			if err := Write(dir, f); err == nil {
				t.Fatalf("Write(%q) succeeded, want an error", f.Namespace)
			}
			var found []string
			filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if p != dir {
					found = append(found, p)
				}
				return nil
			})
			if len(found) != 0 {
				t.Errorf("a refused write left files behind: %v", found)
			}
		})
	}
	for _, ns := range []string{"../x", "a/../../b", "a/b/../../c", "A/b", "a/b\x00"} {
		if p, err := Path(dir, ns); err == nil {
			t.Errorf("Path(%q) = %q, want an error", ns, p)
		}
	}
}

func TestAbortedWriteKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	v1 := sample(t)
	if err := Write(dir, v1); err != nil {
		t.Fatal(err)
	}
	path, _ := Path(dir, v1.Namespace)
	v2 := v1
	v2.Version = 8
	v2.Content = mustSnap(t, content.Property{Key: "banner", Value: []byte("v2")})
	crash := errors.New("simulated crash before rename")
	var sawTemp string
	w := Writer{beforeRename: func(tmp string) error {
		sawTemp = tmp
		if !IsTemp(filepath.Base(tmp)) {
			t.Errorf("temporary file %s not recognised by IsTemp", tmp)
		}
		return crash
	}}
	if err := w.Write(dir, v2); !errors.Is(err, crash) {
		t.Fatalf("Write: err = %v, want %v", err, crash)
	}
	if _, err := os.Stat(sawTemp); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary file %s still exists after a failed write (stat err %v)", sawTemp, err)
	}
	got, err := Read(path)
	if err != nil || got.Version != 7 {
		t.Fatalf("after aborted write: Read = version %d, %v; want version 7", got.Version, err)
	}

	// A crashed process leaves its temporary file: readers ignore it and
	// CleanTemp removes it.
	stray := filepath.Join(filepath.Dir(path), ".fraud-rules.lehr.tmp-123")
	if err := os.WriteFile(stray, []byte("LEHR1\n{partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := CleanTemp(dir); err != nil || n != 1 {
		t.Errorf("CleanTemp = %d, %v; want 1, nil", n, err)
	}
	if _, err := os.Stat(stray); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("CleanTemp left %s", stray)
	}
	if _, err := Read(path); err != nil {
		t.Errorf("CleanTemp damaged the final file: %v", err)
	}

	if err := (Writer{}).Remove(dir, v1.Namespace); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read after Remove: err = %v, want fs.ErrNotExist", err)
	}
	if err := (Writer{}).Remove(dir, v1.Namespace); err != nil {
		t.Errorf("second Remove: %v, want nil", err)
	}
}

// versionFile is the content written for version v in the concurrency test:
// its size and values depend on v, so a mix of two versions cannot verify.
func versionFile(t testing.TB, v uint64) File {
	props := make([]content.Property, 0, 8)
	for i := range 1 + int(v%7) {
		props = append(props, content.Property{
			Key:   fmt.Sprintf("k%d", i),
			Value: bytes.Repeat([]byte{byte(v)}, 1000+int(v%13)*4000),
		})
	}
	return File{Namespace: "race/ns", Version: v, Content: mustSnap(t, props...)}
}

// TestReaderNeverSeesTornFile rewrites a file in a loop while readers read
// it: every read yields a complete, verified version no older than the
// previous read, matching exactly what was written for that version.
func TestReaderNeverSeesTornFile(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, versionFile(t, 1)); err != nil {
		t.Fatal(err)
	}
	path, _ := Path(dir, "race/ns")
	const last = 300
	var wg sync.WaitGroup
	done := make(chan struct{})
	reads := make([]int, 2)
	for r := range reads {
		wg.Go(func() {
			var prev uint64
			for {
				select {
				case <-done:
					return
				default:
				}
				f, err := Read(path)
				if err != nil {
					t.Errorf("reader %d: Read: %v", r, err)
					return
				}
				if f.Version < prev {
					t.Errorf("reader %d: version went back from %d to %d", r, prev, f.Version)
				}
				if want := versionFile(t, f.Version).Content; !f.Content.Equal(want) {
					t.Errorf("reader %d: version %d has content of another version", r, f.Version)
				}
				prev = f.Version
				reads[r]++
			}
		})
	}
	for v := uint64(2); v <= last; v++ {
		w := Writer{NoSync: v%10 != 0} // a durable write every tenth round
		if err := w.Write(dir, versionFile(t, v)); err != nil {
			t.Fatalf("Write v%d: %v", v, err)
		}
	}
	close(done)
	wg.Wait()
	t.Logf("reads per reader: %v", reads)
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %v, want only the final file", entries)
	}
	if f, err := Read(path); err != nil || f.Version != last {
		t.Errorf("final Read = v%d, %v; want v%d", f.Version, err, last)
	}
}

func FuzzDecode(f *testing.F) {
	s := sample(f)
	f.Add(encodeBytes(f, s))
	f.Add(encodeBytes(f, File{Namespace: "a/b"}))
	f.Add(encodeBytes(f, File{Namespace: "a/b", Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_POLICY,
		Content: mustSnap(f, content.Property{Key: "x", Value: []byte{0, 1, 2}})}))
	f.Add([]byte(Magic))
	f.Add([]byte(Magic + "{}\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Decode(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotLehrFile) {
				t.Fatalf("Decode error %v wraps neither ErrCorrupt nor ErrNotLehrFile", err)
			}
			return
		}
		// Whatever decodes re-encodes to a file that decodes to the same.
		var b bytes.Buffer
		if err := Encode(&b, got); err != nil {
			t.Fatalf("Encode of a decoded file: %v", err)
		}
		again, err := Decode(&b)
		if err != nil {
			t.Fatalf("Decode of a re-encoded file: %v", err)
		}
		if diff := cmp.Diff(got, again, fileCmp); diff != "" {
			t.Fatalf("round trip changed the file (-first +second):\n%s", diff)
		}
	})
}

// With Gid set, files and the directories the writer creates belong to
// the consumers' group. Giving a file to a group the process is not in
// needs root; elsewhere the test cannot tell the group apart and skips.
func TestWriteGivesFilesToGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another group needs root")
	}
	const gid = 4242
	dir := t.TempDir()
	w := Writer{NoSync: true, Gid: gid}
	snap, err := content.New([]content.Property{{Key: "k", Value: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	f := FromVersion(content.Version{Namespace: "d/ns", Seq: 1, Checksum: snap.Checksum(), Kind: lehrpb.NamespaceKind_NAMESPACE_KIND_CONFIG, Info: &lehrpb.VersionInfo{}, Content: snap})
	if err := w.Write(dir, f); err != nil {
		t.Fatal(err)
	}
	path, _ := Path(dir, "d/ns")
	for _, p := range []string{path, filepath.Dir(path)} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Sys().(*syscall.Stat_t).Gid; got != gid {
			t.Errorf("%s belongs to group %d; want %d", p, got, gid)
		}
	}
}

// WriteStat reports the file as written — the size and modification time
// the renamed file has — so a writer can tell its own file from one
// changed after it appeared (the agent's file check).
func TestWriteStatIsTheWrittenFile(t *testing.T) {
	dir := t.TempDir()
	v := sample(t)
	fi, err := Writer{}.WriteStat(dir, v)
	if err != nil {
		t.Fatal(err)
	}
	path, _ := Path(dir, v.Namespace)
	got, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != got.Size() || !fi.ModTime().Equal(got.ModTime()) {
		t.Errorf("WriteStat = size %d, mtime %v; the file has %d, %v", fi.Size(), fi.ModTime(), got.Size(), got.ModTime())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)/2], 0o644); err != nil { // torn by someone else at once
		t.Fatal(err)
	}
	if now, err := os.Stat(path); err != nil || now.Size() == fi.Size() {
		t.Errorf("the torn file (%v, %v) looks like the written one", now, err)
	}
}

// TestReadBodyExactBuffer: the body buffer, which decoded values keep
// alive, is exactly the body's size however it was grown; a short input
// returns what it held; a known size allocates once.
func TestReadBodyExactBuffer(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name        string
		n, have     int64 // claimed body size, bytes the input holds
		avail       int64 // what the caller knows (-1: nothing)
		wantLen     int64
		maxAllocPer float64 // bytes allocated per claimed byte, at most (plus 4 KiB)
	}{
		{"empty", 0, 0, -1, 0, 0},
		{"small, unknown size", 1000, 1000, -1, 1000, 1},
		{"3 MiB, unknown size", 3 * mib, 3 * mib, -1, 3 * mib, 3},
		{"5 MiB, unknown size", 5*mib + 1, 5*mib + 1, -1, 5*mib + 1, 3},
		{"5 MiB, known size", 5*mib + 1, 5*mib + 1, 5*mib + 1 + int64(TrailerLen), 5*mib + 1, 1.01},
		{"short input, large claim", 60 * mib, 100, -1, 100, 0.02}, // 1 MiB, not 60
		{"short input, wrong known size", 3 * mib, 2 * mib, 3 * mib, 2 * mib, 1.01},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := bytes.Repeat([]byte{'x'}, int(tt.have))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			got, err := readBody(bytes.NewReader(in), tt.n, tt.avail)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatalf("readBody: %v", err)
			}
			if int64(len(got)) != tt.wantLen || (int64(len(got)) == tt.n && cap(got) != len(got)) {
				t.Errorf("readBody: len %d cap %d, want len %d (cap equal when complete)", len(got), cap(got), tt.wantLen)
			}
			if n := after.TotalAlloc - before.TotalAlloc; float64(n) > tt.maxAllocPer*float64(tt.n)+4096 {
				t.Errorf("readBody allocated %d bytes for a %d-byte claim, want ≤ %.2f per byte", n, tt.n, tt.maxAllocPer)
			}
		})
	}
}
