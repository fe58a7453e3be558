package httpedge

import (
	"net/http"
	"net/http/pprof"
)

// MountPprof serves net/http/pprof's profiles under /debug/pprof/ on mux:
// CPU (/debug/pprof/profile?seconds=N), heap, allocs, goroutine, trace.
func MountPprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
