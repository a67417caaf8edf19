package service

import (
	"strings"

	"go.einride.tech/aip/filtering"
	expr "google.golang.org/genproto/googleapis/api/expr/v1alpha1"

	"lehr.dev/lehr/internal/apierror"
	"lehr.dev/lehr/internal/excerpt"
	"lehr.dev/lehr/proto/lehrpb"
)

// experimentFilterDecls declares what an AIP-160 filter over experiments
// may name: name, etag, author, annotations (a map: annotations.team = "x",
// annotations:team) and preview_metadata.state (ACTIVE, SUSPENDED,
// STATE_UNDEFINED — the last matches experiments never previewed).
func experimentFilterDecls() (*filtering.Declarations, error) {
	return filtering.NewDeclarations(
		filtering.DeclareStandardFunctions(),
		filtering.DeclareIdent("name", filtering.TypeString),
		filtering.DeclareIdent("etag", filtering.TypeString),
		filtering.DeclareIdent("author", filtering.TypeString),
		filtering.DeclareIdent("annotations", filtering.TypeMap(filtering.TypeString, filtering.TypeString)),
		filtering.DeclareEnumIdent("preview_metadata.state", lehrpb.PolicyPreviewMetadata_STATE_UNDEFINED.Type()),
	)
}

// parseExperimentFilter parses and type-checks filter with the maintained
// AIP-160 parser (go.einride.tech/aip/filtering) and returns a predicate
// evaluating the checked expression on an experiment. "" matches all.
func parseExperimentFilter(filter string) (func(*lehrpb.PolicyExperiment) bool, error) {
	decls, err := experimentFilterDecls()
	if err != nil {
		return nil, err
	}
	f, err := filtering.ParseFilterString(filter, decls)
	if err != nil {
		return nil, invalid(apierror.ReasonInvalidArgument, "filter",
			"filter %s: %v; filters name, etag, author, annotations.<key> and preview_metadata.state, e.g. \"preview_metadata.state = ACTIVE\"", excerpt.Quote(filter), err)
	}
	if f.CheckedExpr == nil {
		return func(*lehrpb.PolicyExperiment) bool { return true }, nil
	}
	root := f.CheckedExpr.GetExpr()
	return func(e *lehrpb.PolicyExperiment) bool {
		v, _ := evalFilter(root, e)
		b, _ := v.(bool)
		return b
	}, nil
}

// evalFilter evaluates a checked filter expression on e. Values are bool,
// string or map[string]string; an identifier the checker accepted that is
// not a field is an enum value and stands for its name. A field the
// experiment does not have is "" (absent annotation, no preview_metadata:
// STATE_UNDEFINED).
func evalFilter(x *expr.Expr, e *lehrpb.PolicyExperiment) (any, bool) {
	switch k := x.GetExprKind().(type) {
	case *expr.Expr_ConstExpr:
		switch c := k.ConstExpr.GetConstantKind().(type) {
		case *expr.Constant_StringValue:
			return c.StringValue, true
		case *expr.Constant_BoolValue:
			return c.BoolValue, true
		}
		return nil, false
	case *expr.Expr_IdentExpr:
		switch n := k.IdentExpr.GetName(); n {
		case "name":
			return e.GetName(), true
		case "etag":
			return e.GetEtag(), true
		case "author":
			return e.GetAuthor(), true
		case "annotations":
			return e.GetAnnotations(), true
		default:
			return n, true // an enum value
		}
	case *expr.Expr_SelectExpr:
		op, field := k.SelectExpr.GetOperand(), k.SelectExpr.GetField()
		if id := op.GetIdentExpr().GetName(); id == "preview_metadata" && field == "state" {
			return e.GetPreviewMetadata().GetState().String(), true
		}
		if m, ok := evalFilterMap(op, e); ok {
			return m[field], true
		}
		return nil, false
	case *expr.Expr_CallExpr:
		args := k.CallExpr.GetArgs()
		switch fn := k.CallExpr.GetFunction(); fn {
		case filtering.FunctionAnd, filtering.FunctionFuzzyAnd:
			for _, a := range args {
				if v, _ := evalFilter(a, e); v != true {
					return false, true
				}
			}
			return true, true
		case filtering.FunctionOr:
			for _, a := range args {
				if v, _ := evalFilter(a, e); v == true {
					return true, true
				}
			}
			return false, true
		case filtering.FunctionNot:
			if len(args) != 1 {
				return nil, false
			}
			v, _ := evalFilter(args[0], e)
			return v != true, true
		case filtering.FunctionHas:
			if len(args) != 2 {
				return nil, false
			}
			want, _ := evalFilter(args[1], e)
			ws, _ := want.(string)
			if m, ok := evalFilterMap(args[0], e); ok {
				_, has := m[ws]
				return has || ws == "*" && len(m) > 0, true
			}
			got, _ := evalFilter(args[0], e)
			gs, _ := got.(string)
			return gs == ws || ws == "*" && gs != "", true
		case filtering.FunctionEquals, filtering.FunctionNotEquals,
			filtering.FunctionLessThan, filtering.FunctionLessEquals,
			filtering.FunctionGreaterThan, filtering.FunctionGreaterEquals:
			if len(args) != 2 {
				return nil, false
			}
			a, _ := evalFilter(args[0], e)
			b, _ := evalFilter(args[1], e)
			as, aok := a.(string)
			bs, bok := b.(string)
			if !aok || !bok {
				return false, true
			}
			c := strings.Compare(as, bs)
			switch fn {
			case filtering.FunctionEquals:
				return c == 0, true
			case filtering.FunctionNotEquals:
				return c != 0, true
			case filtering.FunctionLessThan:
				return c < 0, true
			case filtering.FunctionLessEquals:
				return c <= 0, true
			case filtering.FunctionGreaterThan:
				return c > 0, true
			default:
				return c >= 0, true
			}
		}
	}
	return nil, false
}

// evalFilterMap evaluates x as a map (annotations).
func evalFilterMap(x *expr.Expr, e *lehrpb.PolicyExperiment) (map[string]string, bool) {
	v, _ := evalFilter(x, e)
	m, ok := v.(map[string]string)
	return m, ok
}
