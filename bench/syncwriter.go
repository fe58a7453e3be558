package main

import (
	"bytes"
	"sync"
)

// syncWriter is a bytes.Buffer safe for the concurrent writes of a
// process's stdout and stderr.
type syncWriter struct {
	mu sync.Mutex // protects b
	b  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
