package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// env is what every flood is given.
type env struct {
	addr  string // the node's API address
	src   string // the address floods dial from: another host
	short bool
	conns int // the node's conns limit
}

// counters are a flood's requests (or connections), their answers by
// code, and its refusals.
type counters struct {
	sent, refused atomic.Int64

	mu    sync.Mutex // protects following
	codes map[string]int64
	first map[string]string // the first message of each code
}

// answer records one answer's code ("" is a success, "error" a failure
// without one): a refusal when it is resource-exhausted.
func (c *counters) answer(code string) { c.answerErr(code, nil) }

// answerErr records an answer and, for the first of its code, err.
func (c *counters) answerErr(code string, err error) {
	if strings.HasSuffix(code, codeExhausted) { // "grpc resource_exhausted" too
		c.refused.Add(1)
	}
	if code == "" {
		code = "ok"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.codes == nil {
		c.codes, c.first = map[string]int64{}, map[string]string{}
	}
	c.codes[code]++
	if _, ok := c.first[code]; !ok && err != nil {
		c.first[code] = err.Error()
	}
}

// answers lists the answers by code.
func (c *counters) answers() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s []string
	for code, n := range c.codes {
		if m := c.first[code]; m != "" {
			s = append(s, fmt.Sprintf("%s %d (%.160s)", code, n, m))
		} else {
			s = append(s, fmt.Sprintf("%s %d", code, n))
		}
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// codeOf is the code a call's answer is counted under.
func codeOf(code string, err error) string {
	if err != nil && code == "" {
		return "error"
	}
	return code
}

// A flood does its setup, calls start when it begins to flood (start
// returns a context that ends with the measured window), floods until that
// context ends, cleans up and returns. Every loop is bounded by the window.
type flood struct {
	name string
	what string
	run  func(ctx context.Context, e *env, c *counters, start func() context.Context) error
}

var floods = []flood{
	{"sessions", "CreateSession from 64 goroutines, refused at sessions-per-principal", floodSessions},
	{"conns-idle", "twice the conns limit in idle HTTP/2 connections, re-opened when closed", floodConnsIdle},
	{"conns-churn", "dial/close loops (64 goroutines short, 512 full)", floodConnsChurn},
	{"gzip", "gzip bombs (960 MiB inflated) to List, Connect and gRPC, 4 clients", floodGzip},
	{"list", "List(\"\") from 4 clients over 10 000 held names (100 000 full)", floodList},
	{"watch", "5 000 Watch(\"\") streams, each with a new Authorization header", floodWatch},
	{"queued", "one session parking 2 000 blocking Acquires (10 000 full) on a held name", floodQueued},
	{"keepalive", "KeepAlive with 10 000 lease ids per message, 4 clients", floodKeepAlive},
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// closeSessions closes ids from 16 goroutines, within a minute.
func closeSessions(e *env, ids []string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := newRaw(e)
	defer r.close()
	ch := make(chan string)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for id := range ch {
				_ = r.closeSession(ctx, id)
			}
		})
	}
	for _, id := range ids {
		ch <- id
	}
	close(ch)
	wg.Wait()
}

// (a) CreateSession refusals at the per-principal session limit.
func floodSessions(ctx context.Context, e *env, c *counters, start func() context.Context) error {
	var mu sync.Mutex
	var ids []string
	w := start()
	var wg sync.WaitGroup
	for i := range 4 {
		r := newRaw(e)
		defer r.close()
		for range 16 {
			wg.Go(func() {
				for w.Err() == nil {
					c.sent.Add(1)
					id, code, err := r.createSession(w, 300*time.Second, fmt.Sprintf("abuse-sessions-%d", i))
					if w.Err() != nil {
						return
					}
					c.answerErr(codeOf(code, err), err)
					if err == nil {
						mu.Lock()
						ids = append(ids, id)
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	closeSessions(e, ids)
	return nil
}

// bomb is a gzip body that inflates to 960 MiB of zeros (15 gzip members
// of 64 MiB: about 1 MB, under the default request-bytes of 1 MiB).
func bomb() []byte {
	var member bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	zero := make([]byte, 1<<20)
	for range 64 {
		_, _ = zw.Write(zero)
	}
	_ = zw.Close()
	return bytes.Repeat(member.Bytes(), 15)
}

// sendBomb sends b to List as Connect (Content-Encoding gzip) or as gRPC
// (grpc-encoding gzip, a compressed message) and returns the answer's code.
func sendBomb(ctx context.Context, r *rawClient, b []byte, grpc bool) (string, error) {
	body := b
	if grpc {
		body = envelope(1, b)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+service+"List", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	if grpc {
		hr.Header.Set("Content-Type", "application/grpc")
		hr.Header.Set("Grpc-Encoding", "gzip")
		hr.Header.Set("Te", "trailers")
	} else {
		hr.Header.Set("Content-Type", "application/json")
		hr.Header.Set("Content-Encoding", "gzip")
		hr.Header.Set("Connect-Protocol-Version", "1")
	}
	began := time.Now()
	res, err := r.hc.Do(hr)
	if err != nil {
		return "", err
	}
	defer func() { _ = res.Body.Close() }()
	data, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if grpc {
		st, msg := res.Trailer.Get("Grpc-Status"), res.Trailer.Get("Grpc-Message")
		if st == "" {
			st, msg = res.Header.Get("Grpc-Status"), res.Header.Get("Grpc-Message")
		}
		info := fmt.Errorf("gRPC: grpc-status %s %s (%v)", st, msg, time.Since(began).Round(time.Millisecond))
		if st == "8" {
			return codeExhausted, info
		}
		return "grpc-status " + st, info
	}
	info := fmt.Errorf("connect: http %d %.200s (%v)", res.StatusCode, data, time.Since(began).Round(time.Millisecond))
	switch {
	case res.StatusCode == http.StatusOK:
		return "", nil
	case bytes.Contains(data, []byte(`"code":"`+codeExhausted+`"`)):
		return codeExhausted, info
	}
	return "http " + strconv.Itoa(res.StatusCode), info
}

// (c) gzip bombs.
func floodGzip(ctx context.Context, e *env, c *counters, start func() context.Context) error {
	b := bomb()
	w := start()
	var wg sync.WaitGroup
	for i := range 4 {
		r := newRaw(e)
		defer r.close()
		wg.Go(func() {
			for n := 0; w.Err() == nil; n++ {
				c.sent.Add(1)
				grpc := (i+n)%2 == 1
				code, err := sendBomb(w, r, b, grpc)
				if w.Err() != nil {
					return
				}
				if grpc { // the first answer of each protocol is logged
					code = pick(code == "", "", "grpc "+code)
				}
				c.answerErr(codeOf(code, err), err)
			}
		})
	}
	wg.Wait()
	return nil
}

// holdNames creates sessions (TTL 5 min) from the flood's address, each
// holding perSession names under prefix, and returns their lease ids.
func holdNames(ctx context.Context, e *env, sessions, perSession int, prefix string) ([]string, error) {
	r := newRaw(e)
	defer r.close()
	var ids []string
	for range sessions {
		id, _, err := r.createSession(ctx, 5*time.Minute, "abuse-holder")
		if err != nil {
			closeSessions(e, ids)
			return nil, err
		}
		ids = append(ids, id)
	}
	type job struct {
		id   string
		name string
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range 32 {
		wg.Go(func() {
			for j := range jobs {
				if _, err := r.unary(ctx, "TryAcquire", map[string]any{"name": j.name, "leaseId": j.id}, nil); err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	for s, id := range ids {
		for i := range perSession {
			jobs <- job{id, fmt.Sprintf("%s%03d:%04d", prefix, s, i)}
		}
	}
	close(jobs)
	wg.Wait()
	if err := failed.Load(); err != nil {
		closeSessions(e, ids)
		return nil, fmt.Errorf("holding names: %w", *err)
	}
	return ids, nil
}

// (d) List floods over many held names.
func floodList(ctx context.Context, e *env, c *counters, start func() context.Context) error {
	sessions := 10
	if !e.short {
		sessions = 100
	}
	ids, err := holdNames(ctx, e, sessions, 1000, "abuse:list:")
	if err != nil {
		return err
	}
	defer closeSessions(e, ids)
	w := start()
	var wg sync.WaitGroup
	for range 4 {
		r := newRaw(e)
		defer r.close()
		wg.Go(func() {
			for w.Err() == nil {
				c.sent.Add(1)
				code, err := r.unary(w, "List", map[string]any{"prefix": ""}, nil)
				if w.Err() != nil {
					return
				}
				c.answerErr(codeOf(code, err), err)
			}
		})
	}
	wg.Wait()
	return nil
}

// (e) Watch opens with rotating Authorization headers (with auth off,
// each header is a principal of its own): 5 000 streams over 25
// connection pools, opened before the window (each asks for progress, so
// that its answer's headers come once it is registered or refused), held
// through it, and each re-opened under a new header a second after it
// ended (refused).
func floodWatch(ctx context.Context, e *env, c *counters, start func() context.Context) error {
	const n = 5000
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pools := make([]*rawClient, 25)
	for i := range pools {
		pools[i] = newRaw(e)
		defer pools[i].close()
	}
	msg := envelope(0, []byte(`{"prefix":"","progressNotify":true}`))
	var opened sync.WaitGroup
	opened.Add(n)
	var wg sync.WaitGroup
	for i := range n {
		r := pools[i%len(pools)]
		wg.Go(func() {
			once := sync.OnceFunc(opened.Done)
			defer once()
			for fctx.Err() == nil {
				hr, err := http.NewRequestWithContext(fctx, http.MethodPost, r.base+service+"Watch", bytes.NewReader(msg))
				if err != nil {
					return
				}
				hr.Header.Set("Content-Type", "application/connect+json")
				hr.Header.Set("Authorization", "Bearer "+randHex(16))
				c.sent.Add(1)
				res, err := r.hc.Do(hr)
				once()
				if fctx.Err() != nil {
					return // held until the end
				}
				if err != nil {
					c.answerErr("error", err)
					sleepCtx(fctx, time.Second)
					continue
				}
				code, _, err := readStream(res.Body)
				_ = res.Body.Close()
				if fctx.Err() != nil {
					return
				}
				c.answerErr(codeOf(code, err), err)
				sleepCtx(fctx, time.Second)
			}
		})
	}
	ready := make(chan struct{})
	go func() { opened.Wait(); close(ready) }()
	select { // every stream answered once (bounded: 20 s)
	case <-ready:
	case <-time.After(20 * time.Second):
	}
	w := start()
	<-w.Done()
	cancel()
	wg.Wait()
	return nil
}

// (f) queued Acquires: one session parks blocking Acquires on a name
// another session holds, re-sending each one that is refused.
func floodQueued(ctx context.Context, e *env, c *counters, start func() context.Context) error {
	n := 2000
	if !e.short {
		n = 10000
	}
	const name = "abuse:queued"
	r := newRaw(e)
	defer r.close()
	holder, _, err := r.createSession(ctx, 5*time.Minute, "abuse-queue-holder")
	if err != nil {
		return err
	}
	parker, _, err := r.createSession(ctx, 5*time.Minute, "abuse-queue-parker")
	if err != nil {
		closeSessions(e, []string{holder})
		return err
	}
	defer closeSessions(e, []string{parker, holder})
	if _, err := r.unary(ctx, "TryAcquire", map[string]any{"name": name, "leaseId": holder}, nil); err != nil {
		return err
	}
	pools := make([]*rawClient, max(1, n/200))
	for i := range pools {
		pools[i] = newRaw(e)
		defer pools[i].close()
	}
	w := start()
	var wg sync.WaitGroup
	for i := range n {
		p := pools[i%len(pools)]
		wg.Go(func() {
			for w.Err() == nil {
				var id [8]byte
				_, _ = rand.Read(id[:])
				waitID := binary.BigEndian.Uint64(id[:]) & math.MaxInt64
				c.sent.Add(1)
				code, err := p.unary(w, "Acquire", map[string]any{
					"name": name, "leaseId": parker, "waitMs": 0, "waitId": strconv.FormatUint(max(waitID, 1), 10)}, nil)
				if w.Err() != nil {
					return // parked until the end
				}
				c.answerErr(codeOf(code, err), err)
				sleepCtx(w, 100*time.Millisecond)
			}
		})
	}
	wg.Wait()
	return nil
}

// (g) KeepAlive messages with 10 000 lease ids each (100 live sessions of
// the flood's, each named 100 times).
func floodKeepAlive(ctx context.Context, e *env, c *counters, start func() context.Context) error {
	ids, err := holdNames(ctx, e, 100, 0, "")
	if err != nil {
		return err
	}
	defer closeSessions(e, ids)
	many := make([]string, 0, 10000)
	for len(many) < 10000 {
		many = append(many, ids...)
	}
	req := map[string]any{"leaseIds": many[:10000]}
	w := start()
	var wg sync.WaitGroup
	for range 4 {
		r := newRaw(e)
		defer r.close()
		wg.Go(func() {
			for w.Err() == nil {
				c.sent.Add(1)
				code, err := r.unary(w, "KeepAlive", req, nil)
				if w.Err() != nil {
					return
				}
				c.answerErr(codeOf(code, err), err)
			}
		})
	}
	wg.Wait()
	return nil
}
