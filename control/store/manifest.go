package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/proto/lehrpb"
)

// manifest is a snapshot cut into content-addressed blobs: the values, and
// the manifest chunks that list them in key order.
type manifest struct {
	chunkHashes []string
	chunks      [][]byte   // encoded lehrpb.ManifestChunk, by chunkHashes index
	chunkValues [][]string // value hashes each chunk references
	values      map[string][]byte
}

// chunkBoundaryMask makes about one key in 128 end a manifest chunk.
const chunkBoundaryMask = 127

// maxEntryBytes bounds a manifest entry's key and content type, so that an
// entry always fits in a chunk.
const maxEntryBytes = 16 << 10

func blobHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// buildManifest cuts snap into chunks. A chunk ends after a key whose FNV
// hash has its low seven bits zero, or when it reaches chunkTargetBytes.
// Because boundaries depend on keys, not positions, changing a value
// rewrites only the chunk holding its key, and adding or removing a key
// rewrites only its own chunk: a patch shares every other chunk with its
// parent.
func buildManifest(snap content.Snapshot) (*manifest, error) {
	m := &manifest{values: make(map[string][]byte)}
	var cur lehrpb.ManifestChunk
	var curValues []string
	curSize := 0
	flush := func() {
		if len(cur.Entries) == 0 {
			return
		}
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&cur)
		m.chunkHashes = append(m.chunkHashes, blobHash(b))
		m.chunks = append(m.chunks, b)
		m.chunkValues = append(m.chunkValues, curValues)
		cur, curValues, curSize = lehrpb.ManifestChunk{}, nil, 0
	}
	for _, p := range snap.Props() {
		if len(p.Value) > MaxBlobBytes {
			return nil, invalidf("property %q: value is %d bytes, the store holds at most %d", p.Key, len(p.Value), MaxBlobBytes)
		}
		if len(p.Key)+len(p.ContentType) > maxEntryBytes {
			return nil, invalidf("property %q: key and content type are %d bytes, the store holds at most %d", p.Key, len(p.Key)+len(p.ContentType), maxEntryBytes)
		}
		// Proto strings must be UTF-8, and encoding cannot fail after this.
		if !utf8.ValidString(p.Key) || !utf8.ValidString(p.ContentType) {
			return nil, invalidf("property %q: key and content type must be valid UTF-8", p.Key)
		}
		h := blobHash(p.Value)
		m.values[h] = p.Value
		e := &lehrpb.ManifestEntry{Key: p.Key, ContentType: p.ContentType, ValueHash: h, Size: int64(len(p.Value))}
		esize := proto.Size(e) + 4 // + tag and length prefix
		if curSize+esize > chunkTargetBytes {
			flush()
		}
		cur.Entries = append(cur.Entries, e)
		curValues = append(curValues, h)
		curSize += esize
		f := fnv.New32a()
		f.Write([]byte(p.Key))
		if f.Sum32()&chunkBoundaryMask == 0 {
			flush()
		}
	}
	flush()
	return m, nil
}

// blobRef names a blob to fetch and its expected size (0 if unknown).
type blobRef struct {
	hash string
	size int64
}

// getBlobs fetches blobs of ns at revision rev, in as few requests as the
// size limits allow, and verifies that each matches its hash. A blob that is
// missing or does not match is ErrCorrupt.
func (s *Store) getBlobs(ctx context.Context, ns string, refs []blobRef, rev int64) (map[string][]byte, error) {
	out := make(map[string][]byte, len(refs))
	var ops []clientv3.Op
	var hashes []string
	var bytes int64
	fetch := func() error {
		if len(ops) == 0 {
			return nil
		}
		rs, _, err := s.readAt(ctx, ops...)
		if err != nil {
			return err
		}
		for i, r := range rs {
			h := hashes[i]
			if len(r.Kvs) == 0 {
				return fmt.Errorf("%w: blob %s of %s is missing", ErrCorrupt, h, ns)
			}
			v := r.Kvs[0].Value
			if got := blobHash(v); got != h {
				return fmt.Errorf("%w: blob %s of %s hashes to %s", ErrCorrupt, h, ns, got)
			}
			out[h] = v
		}
		ops, hashes, bytes = ops[:0], hashes[:0], 0
		return nil
	}
	for _, r := range refs {
		if _, dup := out[r.hash]; dup {
			continue
		}
		size := r.size
		if size <= 0 {
			size = chunkTargetBytes
		}
		if len(ops) == maxOpsPerTxn || (len(ops) > 0 && bytes+size > maxReadBatchBytes) {
			if err := fetch(); err != nil {
				return nil, err
			}
		}
		out[r.hash] = nil // reserve, so duplicates are not fetched twice
		ops = append(ops, clientv3.OpGet(s.lay.blob(ns, r.hash), clientv3.WithRev(rev)))
		hashes = append(hashes, r.hash)
		bytes += size
	}
	if err := fetch(); err != nil {
		return nil, err
	}
	return out, nil
}

// readChunks fetches and decodes manifest chunks at revision rev.
func (s *Store) readChunks(ctx context.Context, ns string, hashes []string, rev int64) (map[string]*lehrpb.ManifestChunk, error) {
	refs := make([]blobRef, len(hashes))
	for i, h := range hashes {
		refs[i] = blobRef{hash: h}
	}
	raw, err := s.getBlobs(ctx, ns, refs, rev)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*lehrpb.ManifestChunk, len(raw))
	for h, b := range raw {
		c := new(lehrpb.ManifestChunk)
		if err := decode(s.lay.blob(ns, h), b, c); err != nil {
			return nil, err
		}
		out[h] = c
	}
	return out, nil
}

// readContent assembles the content of rec at revision rev and verifies it
// against the recorded checksum.
func (s *Store) readContent(ctx context.Context, ns string, rec *lehrpb.VersionRecord, rev int64) (content.Snapshot, error) {
	chunks, err := s.readChunks(ctx, ns, rec.GetManifestChunks(), rev)
	if err != nil {
		return content.Snapshot{}, err
	}
	var entries []*lehrpb.ManifestEntry
	var refs []blobRef
	for _, h := range rec.GetManifestChunks() {
		for _, e := range chunks[h].GetEntries() {
			entries = append(entries, e)
			refs = append(refs, blobRef{hash: e.GetValueHash(), size: e.GetSize()})
		}
	}
	values, err := s.getBlobs(ctx, ns, refs, rev)
	if err != nil {
		return content.Snapshot{}, err
	}
	props := make([]content.Property, len(entries))
	for i, e := range entries {
		props[i] = content.Property{Key: e.GetKey(), ContentType: e.GetContentType(), Value: values[e.GetValueHash()]}
	}
	snap, err := content.New(props)
	if err != nil {
		return content.Snapshot{}, fmt.Errorf("%w: manifest of %s@%d: %w", ErrCorrupt, ns, rec.GetInfo().GetSeq(), err)
	}
	if got, want := snap.Checksum(), rec.GetInfo().GetChecksum(); got != want {
		return content.Snapshot{}, fmt.Errorf("%w: %s@%d has checksum %s, recorded %s", ErrCorrupt, ns, rec.GetInfo().GetSeq(), got, want)
	}
	return snap, nil
}
