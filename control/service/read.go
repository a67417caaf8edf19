package service

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"lehr.dev/lehr/control/store"
	"lehr.dev/lehr/control/validate"
	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Paging defaults.
const (
	defaultHistoryPage = 20
	defaultListPage    = 100
	maxPage            = 1000
)

// Get reads the latest or a given version, optionally some keys only.
func (s *Service) Get(ctx context.Context, req *lehrpb.GetRequest) (_ *lehrpb.GetResponse, err error) {
	defer s.track(ctx, "Get", time.Now(), &err)
	if _, _, err := names.Namespace(req.GetNamespace()); err != nil {
		return nil, nameError("namespace", err)
	}
	// A version holds at most validate.MaxProperties keys, so more can
	// only repeat or miss.
	if n := len(req.GetKeys()); n > validate.MaxProperties {
		return nil, tooMany("keys", n, validate.MaxProperties)
	}
	for i, k := range req.GetKeys() {
		if err := names.Key(k); err != nil {
			return nil, nameError(propField("keys", i, ""), err)
		}
	}
	ns, info, snap, err := s.read(ctx, req.GetNamespace(), req.GetVersion(), "version")
	if err != nil {
		return nil, err
	}
	props := snap.Props()
	if len(req.GetKeys()) > 0 {
		props = make([]content.Property, 0, len(req.GetKeys()))
		seen := make(map[string]bool, len(req.GetKeys()))
		for i, k := range req.GetKeys() {
			p, ok := snap.Get(k)
			if !ok {
				return nil, apierror.New(codes.NotFound, apierror.ReasonMissingKey, propField("keys", i, ""),
					"key %q is not in %s version %d", k, req.GetNamespace(), info.GetSeq())
			}
			if !seen[k] {
				seen[k] = true
				props = append(props, p)
			}
		}
		c, err := content.New(props) // sorts
		if err != nil {
			return nil, err
		}
		props = c.Props()
	}
	return &lehrpb.GetResponse{Version: info, Properties: content.ToProto(props), Kind: ns.GetKind()}, nil
}

// FetchVersion returns a whole version, for distributors (of zones the
// domain's readers admit: readers.go).
func (s *Service) FetchVersion(ctx context.Context, req *lehrpb.FetchVersionRequest) (_ *lehrpb.FetchVersionResponse, err error) {
	defer s.track(ctx, "FetchVersion", time.Now(), &err)
	if _, _, err := names.Namespace(req.GetNamespace()); err != nil {
		return nil, nameError("namespace", err)
	}
	if err := s.mayRead(ctx, req.GetNamespace()); err != nil {
		return nil, err
	}
	ns, info, snap, err := s.read(ctx, req.GetNamespace(), req.GetVersion(), "version")
	if err != nil {
		return nil, err
	}
	return &lehrpb.FetchVersionResponse{Version: info, Kind: ns.GetKind(), Properties: content.ToProto(snap.Props())}, nil
}

// FetchDelta returns what changed between two versions: from is required,
// to 0 means the latest. Distributors read only domains whose readers
// admit their zone (readers.go).
func (s *Service) FetchDelta(ctx context.Context, req *lehrpb.FetchDeltaRequest) (_ *lehrpb.FetchDeltaResponse, err error) {
	defer s.track(ctx, "FetchDelta", time.Now(), &err)
	if _, _, err := names.Namespace(req.GetNamespace()); err != nil {
		return nil, nameError("namespace", err)
	}
	if err := s.mayRead(ctx, req.GetNamespace()); err != nil {
		return nil, err
	}
	if req.GetFrom() == 0 {
		return nil, invalid(apierror.ReasonInvalidArgument, "from", "from is required; use FetchVersion for a whole version")
	}
	ns, toInfo, to, err := s.read(ctx, req.GetNamespace(), req.GetTo(), "to")
	if err != nil {
		return nil, err
	}
	_, fromInfo, from, err := s.read(ctx, req.GetNamespace(), req.GetFrom(), "from")
	if err != nil {
		return nil, err
	}
	p := content.Diff(from, to)
	return &lehrpb.FetchDeltaResponse{
		From:   fromInfo,
		To:     toInfo,
		Kind:   ns.GetKind(),
		Set:    content.ToProto(p.Set),
		Delete: p.Delete,
	}, nil
}

// Diff compares two versions; 0 means the latest for either.
func (s *Service) Diff(ctx context.Context, req *lehrpb.DiffRequest) (_ *lehrpb.DiffResponse, err error) {
	defer s.track(ctx, "Diff", time.Now(), &err)
	if _, _, err := names.Namespace(req.GetNamespace()); err != nil {
		return nil, nameError("namespace", err)
	}
	_, fromInfo, from, err := s.read(ctx, req.GetNamespace(), req.GetFrom(), "from")
	if err != nil {
		return nil, err
	}
	_, toInfo, to, err := s.read(ctx, req.GetNamespace(), req.GetTo(), "to")
	if err != nil {
		return nil, err
	}
	return &lehrpb.DiffResponse{From: fromInfo, To: toInfo, Changes: content.ChangesToProto(content.Changes(from, to))}, nil
}

// History lists versions newest first. The page token encodes the sequence
// number to continue below.
func (s *Service) History(ctx context.Context, req *lehrpb.HistoryRequest) (_ *lehrpb.HistoryResponse, err error) {
	defer s.track(ctx, "History", time.Now(), &err)
	if _, _, err := names.Namespace(req.GetNamespace()); err != nil {
		return nil, nameError("namespace", err)
	}
	size, err := pageSize(req.GetPageSize(), defaultHistoryPage)
	if err != nil {
		return nil, err
	}
	var before uint64
	if t := req.GetPageToken(); t != "" {
		raw, err := decodeToken("h", t)
		if err == nil {
			before, err = strconv.ParseUint(raw, 10, 64)
		}
		if err != nil || before == 0 {
			return nil, invalid(apierror.ReasonInvalidArgument, "page_token", "page_token is not one this API returned for History")
		}
	}
	vs, err := s.st.History(ctx, req.GetNamespace(), before, size+1)
	if err != nil {
		return nil, withField(s.apiError(ctx, err), "namespace")
	}
	if len(vs) == 0 && before == 0 {
		// Tell an unknown namespace from an empty one.
		if _, err := s.st.GetNamespace(ctx, req.GetNamespace()); err != nil {
			return nil, withField(s.apiError(ctx, err), "namespace")
		}
	}
	resp := &lehrpb.HistoryResponse{Versions: vs}
	if len(vs) > size {
		resp.Versions = vs[:size]
		resp.NextPageToken = encodeToken("h", strconv.FormatUint(vs[size-1].GetSeq(), 10))
	}
	return resp, nil
}

// read returns a namespace, one of its versions and its content; seq 0 is
// the latest. A missing version is reported on field.
func (s *Service) read(ctx context.Context, ns string, seq uint64, field string) (*lehrpb.Namespace, *lehrpb.VersionInfo, content.Snapshot, error) {
	n, err := s.st.GetNamespace(ctx, ns)
	if err != nil {
		return nil, nil, content.Snapshot{}, withField(s.apiError(ctx, err), "namespace")
	}
	if seq == 0 && n.GetLatestVersion() == 0 {
		return nil, nil, content.Snapshot{}, apierror.New(codes.NotFound, apierror.ReasonNotFound, "namespace",
			"namespace %s has no versions yet; publish first", ns)
	}
	if seq > n.GetLatestVersion() {
		return nil, nil, content.Snapshot{}, apierror.New(codes.NotFound, apierror.ReasonNotFound, field,
			"%s has no version %d: latest is %d", ns, seq, n.GetLatestVersion())
	}
	info, snap, err := s.st.Content(ctx, ns, seq)
	if err != nil {
		var nf *store.NotFoundError
		if errors.As(err, &nf) && nf.What == "version" {
			e := apierror.New(codes.NotFound, apierror.ReasonNotFound, field, "%s version %d not found", ns, seq)
			if nf.Oldest != 0 {
				e.Message += ": it was compacted; history keeps versions from " + strconv.FormatUint(nf.Oldest, 10) + " on"
			}
			return nil, nil, content.Snapshot{}, e
		}
		return nil, nil, content.Snapshot{}, withField(s.apiError(ctx, err), field)
	}
	return n, info, snap, nil
}

// pageSize applies the default and the cap to a requested page size.
func pageSize(n int32, def int) (int, error) {
	switch {
	case n < 0:
		return 0, invalid(apierror.ReasonInvalidArgument, "page_size", "page_size %d is negative", n).WithLimit("%d", maxPage)
	case n == 0:
		return def, nil
	case n > maxPage:
		return maxPage, nil
	}
	return int(n), nil
}

// encodeToken makes an opaque page token of a kind and a position.
func encodeToken(kind, pos string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + ":" + pos))
}

var errBadToken = errors.New("service: bad page token")

func decodeToken(kind, tok string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", errBadToken
	}
	pos, ok := strings.CutPrefix(string(b), kind+":")
	if !ok {
		return "", errBadToken
	}
	return pos, nil
}
