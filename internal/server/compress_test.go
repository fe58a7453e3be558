package server_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/http"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/servertest"
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
