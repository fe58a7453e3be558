package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

const service = "/leasehold.v1.LeaseholdService/"

// codeExhausted is the Connect (and, as grpc-status 8, the gRPC) code of a
// refusal by a limit.
const codeExhausted = "resource_exhausted"

// rawClient speaks the Connect protocol (JSON) or gRPC over HTTP/2 without
// TLS, from the flood's source address, one connection pool per client.
type rawClient struct {
	hc   *http.Client
	base string
	auth string // Authorization header, when set
}

func newRaw(e *env) *rawClient {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	d := e.dialer()
	return &rawClient{
		hc:   &http.Client{Transport: &http.Transport{Protocols: &p, DialContext: d.DialContext}},
		base: "http://" + e.addr,
	}
}

func (r *rawClient) close() { r.hc.CloseIdleConnections() }

// unary calls method with req as JSON and decodes the answer into resp;
// on an error answer it returns the Connect code too.
func (r *rawClient) unary(ctx context.Context, method string, req, resp any) (string, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+service+method, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Connect-Protocol-Version", "1")
	if r.auth != "" {
		hr.Header.Set("Authorization", r.auth)
	}
	res, err := r.hc.Do(hr)
	if err != nil {
		return "", err
	}
	defer func() { _ = res.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return "", err
	}
	if res.StatusCode != http.StatusOK {
		var e struct{ Code, Message string }
		_ = json.Unmarshal(data, &e)
		return e.Code, fmt.Errorf("%s: http %d %s: %s", method, res.StatusCode, e.Code, e.Message)
	}
	if resp == nil {
		return "", nil
	}
	return "", json.Unmarshal(data, resp)
}

// createSession returns a new session's lease id.
func (r *rawClient) createSession(ctx context.Context, ttl time.Duration, owner string) (string, string, error) {
	var resp struct {
		LeaseID string `json:"leaseId"`
	}
	code, err := r.unary(ctx, "CreateSession", map[string]any{"ttlMs": ttl.Milliseconds(), "owner": owner}, &resp)
	return resp.LeaseID, code, err
}

func (r *rawClient) closeSession(ctx context.Context, id string) error {
	_, err := r.unary(ctx, "CloseSession", map[string]any{"leaseId": id}, nil)
	return err
}

// envelope frames one message as gRPC and Connect streams do: a flag byte
// and a big-endian length.
func envelope(flags byte, msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// readStream reads a Connect server stream's envelopes until it ends and
// returns the end-of-stream error code ("" when it ended without one), and
// the number of messages read.
func readStream(body io.Reader) (string, int, error) {
	var hdr [5]byte
	for n := 0; ; n++ {
		if _, err := io.ReadFull(body, hdr[:]); err != nil {
			return "", n, err
		}
		size := binary.BigEndian.Uint32(hdr[1:])
		if hdr[0]&2 == 0 {
			if _, err := io.CopyN(io.Discard, body, int64(size)); err != nil {
				return "", n, err
			}
			continue
		}
		var end struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		data, err := io.ReadAll(io.LimitReader(body, int64(size)))
		if err != nil {
			return "", n, err
		}
		_ = json.Unmarshal(data, &end)
		return end.Error.Code, n, nil
	}
}

// h2Preface is what an HTTP/2 client without TLS sends first: the
// connection preface and an empty SETTINGS frame.
var h2Preface = append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)

// connCode is the code a new connection is counted under, by the first
// bytes it got: the node's refusal of a connection beyond its limit (an
// HTTP/1.1 429, resource-exhausted in its body) is resource-exhausted; anything else it was
// sent is a success; nothing at all, "closed".
func connCode(first []byte) string {
	switch {
	case bytes.HasPrefix(first, []byte("HTTP/1.1 429")):
		return codeExhausted
	case len(first) == 0:
		return "closed"
	}
	return ""
}

// dialer returns a dialer from the flood's source address.
func (e *env) dialer() *net.Dialer {
	return &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(e.src)}}
}
