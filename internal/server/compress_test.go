package server_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// TestSmallResponsesUncompressed: a gRPC client that accepts gzip gets a
// response under 1 KiB uncompressed (the message's compressed flag is 0).
func TestSmallResponsesUncompressed(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	msg, err := proto.Marshal(&pb.CreateSessionRequest{TtlMs: 5000})
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	body = append(body, msg...)
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, c.URL+leaseholdv1connect.LeaseholdServiceCreateSessionProcedure, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Grpc-Accept-Encoding", "gzip")
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	res, err := (&http.Client{Transport: &http.Transport{Protocols: &p}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if status := res.Trailer.Get("Grpc-Status"); status != "0" || len(out) < 5 {
		t.Fatalf("grpc-status %q, %d bytes", status, len(out))
	}
	if out[0] != 0 {
		t.Errorf("a %d-byte response was compressed (flag %d, grpc-encoding %q)", len(out)-5, out[0], res.Header.Get("Grpc-Encoding"))
	}
}

// TestGzipBombRefusedAtLimit: a gzip body that inflates far past the
// request limit is refused with resource-exhausted as soon as it passes
// the limit, over Connect (JSON, HTTP/1.1) and gRPC; the server does not
// inflate the rest of it (its answer cannot name the inflated size).
func TestGzipBombRefusedAtLimit(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	const inflated = 256 << 20
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	zeros := make([]byte, 1<<20)
	for range inflated >> 20 {
		_, _ = zw.Write(zeros)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	check := func(what string, status int, msg string) {
		t.Helper()
		if strings.Contains(msg, strconv.Itoa(inflated)) || !strings.Contains(msg, "inflates past the request limit") {
			t.Errorf("%s: the bomb was inflated to its end, or refused for another reason: %d %s", what, status, msg)
		}
		if !strings.Contains(msg, "resource") {
			t.Errorf("%s: want resource-exhausted, got %d %s", what, status, msg)
		}
	}

	req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPost, c.URL+leaseholdv1connect.LeaseholdServiceListProcedure, bytes.NewReader(bomb.Bytes()))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	res, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(res.Body)
	res.Body.Close()
	check("connect", res.StatusCode, string(out))

	body := make([]byte, 5, 5+bomb.Len())
	body[0] = 1 // compressed
	binary.BigEndian.PutUint32(body[1:], uint32(bomb.Len()))
	body = append(body, bomb.Bytes()...)
	req, _ = http.NewRequestWithContext(ctxT(t), http.MethodPost, c.URL+leaseholdv1connect.LeaseholdServiceListProcedure, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Grpc-Encoding", "gzip")
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	res, err = (&http.Client{Transport: &http.Transport{Protocols: &p}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(res.Body)
	res.Body.Close()
	check("grpc", res.StatusCode, res.Trailer.Get("Grpc-Status")+" "+res.Trailer.Get("Grpc-Message"))
	if got := res.Trailer.Get("Grpc-Status"); got != "8" {
		t.Errorf("grpc: status %q, want 8 (resource exhausted)", got)
	}
}
