package distributor

import (
	"net/http"
	"net/http/pprof"
)

// pprofHandlers are net/http/pprof's handlers under /debug/pprof/, for a
// mux of their own (the package's init also registers them on
// http.DefaultServeMux, which nothing here serves).
func pprofHandlers() map[string]http.Handler {
	return map[string]http.Handler{
		"GET /debug/pprof/":        http.HandlerFunc(pprof.Index),
		"GET /debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
		"GET /debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		"GET /debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
		"GET /debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
	}
}
