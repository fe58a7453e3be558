package admission

// The request-body bounds: a body past request-bytes, announced, chunked,
// in a stream message or inflated, is refused with resource-exhausted.

import (
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strconv"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
)

// tooLarge is the refusal of a request body past limit bytes; n is its
// announced length, 0 when it was not announced.
func tooLarge(n, limit int64) *api.Error {
	what := "a request body of more than " + strconv.FormatInt(limit, 10) + " bytes"
	if n > 0 {
		what = "a request body of " + strconv.FormatInt(n, 10) + " bytes"
	}
	return Exhausted("request-bytes", "%s exceeds the request limit of %d bytes", what, limit)
}

// cappedBody turns http.MaxBytesReader's error into resource-exhausted
// with a message that names the limit, and calls read (when set) once the
// body has been read to its end.
type cappedBody struct {
	io.ReadCloser
	limit int64
	read  func()
}

func (b *cappedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && b.read != nil {
		b.read()
		b.read = nil
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return n, api.ToConnect(tooLarge(0, b.limit))
	}
	return n, err
}

// envelopeCap bounds each message of a request stream (gRPC, gRPC-Web and
// Connect streams frame a message with a 5-byte prefix: a flag byte and a
// big-endian length): a prefix announcing more than limit fails the read
// at once, so an oversized message is never read, not even to skip it.
type envelopeCap struct {
	io.ReadCloser
	limit  int64
	left   int64   // bytes of the current message still to pass
	prefix [5]byte // the prefix being read
	got    int     // bytes of prefix read
	err    error   // set once a prefix announced too much
}

func (e *envelopeCap) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.ReadCloser.Read(p)
	for i := 0; i < n; {
		if e.left > 0 {
			k := min(int64(n-i), e.left)
			i += int(k)
			e.left -= k
			continue
		}
		e.prefix[e.got] = p[i]
		e.got++
		i++
		if e.got < len(e.prefix) {
			continue
		}
		e.got = 0
		e.left = int64(binary.BigEndian.Uint32(e.prefix[1:]))
		if e.left > e.limit {
			e.err = api.ToConnect(Exhausted("request-bytes", "a stream message of %d bytes exceeds the request limit of %d bytes", e.left, e.limit))
			return i, nil // the prefix; the message itself is never read
		}
	}
	return n, err
}

// InflateLimit returns the handler option that replaces connect's gzip
// decompressor with one that fails as soon as a message inflates past
// limit bytes (connect stops reading at the limit but then inflates the
// rest of the message to report its size: a 1 KiB body could cost a
// gigabyte of inflation). Zero: the default decompressor.
func InflateLimit(limit int64) []connect.HandlerOption {
	if limit <= 0 {
		return nil
	}
	return []connect.HandlerOption{connect.WithCompression("gzip",
		func() connect.Decompressor { return &inflateCap{limit: limit} },
		func() connect.Compressor { return gzip.NewWriter(io.Discard) },
	)}
}

// inflateCap is a gzip reader that refuses to inflate one message past
// limit bytes.
type inflateCap struct {
	gz    *gzip.Reader
	limit int64
	n     int64 // bytes inflated from the current message
}

func (d *inflateCap) Read(p []byte) (int, error) {
	if d.gz == nil {
		return 0, io.EOF
	}
	if d.n > d.limit {
		return 0, api.ToConnect(Exhausted("request-bytes", "a compressed request message inflates past the request limit of %d bytes", d.limit))
	}
	// Never inflate more than one byte past the limit in one read.
	if room := d.limit + 1 - d.n; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := d.gz.Read(p)
	d.n += int64(n)
	return n, err
}

func (d *inflateCap) Close() error {
	if d.gz == nil {
		return nil
	}
	return d.gz.Close()
}

func (d *inflateCap) Reset(r io.Reader) error {
	d.n = 0
	if d.gz == nil {
		gz, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		d.gz = gz
		return nil
	}
	return d.gz.Reset(r)
}
