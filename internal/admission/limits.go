package admission

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/api"
)

// Limits bound what one node accepts from its clients, so that a flood of
// connections, streams, sessions, requests or bytes is refused with
// resource-exhausted instead of taking the node's memory or CPU. A zero
// count, rate or timeout means no limit. Every limit is per node except
// SessionsPerPrincipal, which the leader enforces.
type Limits struct {
	// RequestBytes bounds one request message: a body announced larger is
	// refused before it is read, a chunked body is cut at the limit, and a
	// compressed message is bounded after decompression.
	RequestBytes int64
	// Conns bounds the open client connections; one more is answered with
	// an HTTP 429 and closed. With TLS a connection counts once its
	// handshake is done (connlimit.go).
	Conns int
	// ConnsPerAddress bounds the open connections from one remote address
	// (an IPv4 address, or an IPv6 /64), in their TLS handshake or not.
	ConnsPerAddress int
	// ConnsPerPrincipal bounds the open connections of one verified client
	// certificate's principal (node certificates are not counted).
	ConnsPerPrincipal int
	// HandshakesPerAddress and Handshakes bound the connections in their
	// TLS handshake, from one address and on the node.
	HandshakesPerAddress, Handshakes int
	// HandshakeTimeout closes a connection whose TLS handshake is not done
	// in time.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection with no request in flight.
	IdleTimeout time.Duration
	// ReadHeaderTimeout bounds reading a request's headers (and a new
	// connection's first bytes).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading the body of a unary request. Streams
	// (Watch, KeepAliveStream) have no read deadline.
	ReadTimeout time.Duration
	// Watches and WatchesPerPrincipal bound the open Watch streams.
	Watches, WatchesPerPrincipal int
	// KeepAliveStreams and KeepAliveStreamsPerPrincipal bound the open
	// KeepAliveStream streams.
	KeepAliveStreams, KeepAliveStreamsPerPrincipal int
	// SessionsPerPrincipal bounds the live sessions one principal created.
	SessionsPerPrincipal int
	// QueuedPerSession and QueuedPerPrincipal bound the Acquires parked here (queuecap.go).
	QueuedPerSession, QueuedPerPrincipal int
	// Rate is the requests per second one principal may send on average,
	// with bursts of up to Burst; renewals (KeepAlive, KeepAliveStream)
	// are not counted.
	Rate  float64
	Burst int
	// ListRate is the listed entries per second one principal may read on
	// average, with bursts of up to ListBurst: a List is charged the locks
	// it returns, a Watch ended with compacted the locks of the state it
	// sends, a ListSessions the sessions it returns (meter.go).
	ListRate  float64
	ListBurst int
	// WatchOpenRate is the Watch streams per second one principal may
	// open on average, with bursts of up to WatchOpenBurst.
	WatchOpenRate  float64
	WatchOpenBurst int
	// WatchEventRate is the events per second the Watch streams of one
	// principal are sent on average, all its streams together, with bursts
	// of up to WatchEventBurst: a stream that sent more waits (meter.go).
	WatchEventRate  float64
	WatchEventBurst int
	// ConnRatePerAddress is the connections per second one client
	// address (connlimit.go) may open on average, with bursts of up to
	// ConnBurstPerAddress; only connections admitted count.
	ConnRatePerAddress  float64
	ConnBurstPerAddress int
	// ConcurrentPerPrincipal is the unary requests of one principal that
	// run at once; up to WaitingPerPrincipal more wait their turn
	// (shares.go).
	ConcurrentPerPrincipal, WaitingPerPrincipal int
	// RenewRate is the lease ids per second one principal may renew on
	// average (KeepAlive, each KeepAliveStream message), with bursts of up
	// to RenewBurst.
	RenewRate  float64
	RenewBurst int
}

// DefaultRequestBytes is the default of Limits.RequestBytes, the largest
// request message (server.MaxRequestSize).
const DefaultRequestBytes = 1 << 20

// DefaultLimits returns the limits `leasehold serve` starts with.
func DefaultLimits() Limits {
	return Limits{
		RequestBytes:                 DefaultRequestBytes,
		Conns:                        4096,
		ConnsPerAddress:              1024,
		ConnsPerPrincipal:            1024,
		HandshakesPerAddress:         64,
		Handshakes:                   1024,
		HandshakeTimeout:             10 * time.Second,
		IdleTimeout:                  2 * time.Minute,
		ReadHeaderTimeout:            10 * time.Second,
		ReadTimeout:                  10 * time.Second,
		Watches:                      4096,
		WatchesPerPrincipal:          512,
		KeepAliveStreams:             4096,
		KeepAliveStreamsPerPrincipal: 512,
		SessionsPerPrincipal:         10000,
		QueuedPerSession:             1000,
		QueuedPerPrincipal:           10000,
		Rate:                         50000,
		Burst:                        100000,
		ListRate:                     10000, // the defaults of the meters: see newMeters
		ListBurst:                    20000,
		WatchOpenRate:                100,
		WatchOpenBurst:               512,
		WatchEventRate:               5000,
		WatchEventBurst:              10000,
		ConnRatePerAddress:           200,
		ConnBurstPerAddress:          2048,
		ConcurrentPerPrincipal:       16,
		WaitingPerPrincipal:          4096,
		RenewRate:                    60000,
		RenewBurst:                   60000,
	}
}

// limitFields names every limit as `serve --limit NAME=VALUE` spells it.
func (l *Limits) fields() map[string]any {
	return map[string]any{
		"request-bytes":                   &l.RequestBytes,
		"conns":                           &l.Conns,
		"conns-per-address":               &l.ConnsPerAddress,
		"conns-per-principal":             &l.ConnsPerPrincipal,
		"conn-rate-per-address":           &l.ConnRatePerAddress,
		"concurrent-per-principal":        &l.ConcurrentPerPrincipal,
		"waiting-per-principal":           &l.WaitingPerPrincipal,
		"conn-burst-per-address":          &l.ConnBurstPerAddress,
		"handshakes-per-address":          &l.HandshakesPerAddress,
		"handshakes":                      &l.Handshakes,
		"handshake-timeout":               &l.HandshakeTimeout,
		"idle-timeout":                    &l.IdleTimeout,
		"read-header-timeout":             &l.ReadHeaderTimeout,
		"read-timeout":                    &l.ReadTimeout,
		"watches":                         &l.Watches,
		"watches-per-principal":           &l.WatchesPerPrincipal,
		"keepalive-streams":               &l.KeepAliveStreams,
		"keepalive-streams-per-principal": &l.KeepAliveStreamsPerPrincipal,
		"sessions-per-principal":          &l.SessionsPerPrincipal,
		"queued-per-session":              &l.QueuedPerSession,
		"queued-per-principal":            &l.QueuedPerPrincipal,
		"rate":                            &l.Rate,
		"burst":                           &l.Burst,
		"list-rate":                       &l.ListRate,
		"list-burst":                      &l.ListBurst,
		"watch-open-rate":                 &l.WatchOpenRate,
		"watch-open-burst":                &l.WatchOpenBurst,
		"watch-event-rate":                &l.WatchEventRate,
		"watch-event-burst":               &l.WatchEventBurst,
		"renew-rate":                      &l.RenewRate,
		"renew-burst":                     &l.RenewBurst,
	}
}

// LimitNames returns the names Set accepts, sorted.
func LimitNames() []string {
	var l Limits
	var names []string
	for n := range l.fields() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Get returns the limit name as Set reads it ("" for an unknown name).
func (l *Limits) Get(name string) string {
	switch p := l.fields()[name].(type) {
	case *int:
		return strconv.Itoa(*p)
	case *float64:
		return strconv.FormatFloat(*p, 'g', -1, 64)
	case *time.Duration:
		return p.String()
	case *int64:
		if *p%(1<<20) == 0 && *p > 0 {
			return strconv.FormatInt(*p>>20, 10) + "MiB"
		}
		return strconv.FormatInt(*p, 10)
	}
	return ""
}

// Set sets the limit name (as LimitNames spells it) from value: a count,
// a rate, a byte count (with KiB, MiB or GiB) or a duration ("90s").
func (l *Limits) Set(name, value string) error {
	p, ok := l.fields()[name]
	if !ok {
		return fmt.Errorf("unknown limit %q; the limits are %s", name, strings.Join(LimitNames(), ", "))
	}
	var err error
	switch p := p.(type) {
	case *int:
		*p, err = strconv.Atoi(value)
	case *float64:
		*p, err = strconv.ParseFloat(value, 64)
	case *time.Duration:
		*p, err = time.ParseDuration(value)
	case *int64:
		*p, err = ParseBytes(value)
	}
	if err != nil {
		return fmt.Errorf("limit %s=%q: %w", name, value, err)
	}
	return nil
}

// ParseBytes reads a byte count: an integer ≥ 0, optionally with KiB, MiB
// or GiB.
func ParseBytes(s string) (int64, error) {
	mult := int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if v, ok := strings.CutSuffix(s, suffix); ok {
			s, mult = strings.TrimSpace(v), m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a byte count (an integer, optionally with KiB, MiB or GiB)", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("%s%s is too large", s, map[int64]string{1: "", 1 << 10: "KiB", 1 << 20: "MiB", 1 << 30: "GiB"}[mult])
	}
	return n * mult, nil
}

// Validate reports the first limit that is negative or below its floor.
func (l Limits) Validate() error {
	for _, name := range LimitNames() {
		var neg bool
		switch p := l.fields()[name].(type) {
		case *int:
			neg = *p < 0
		case *int64:
			neg = *p < 0
		case *float64:
			neg = *p < 0 || *p != *p
		case *time.Duration:
			neg = *p < 0
		}
		if neg {
			return fmt.Errorf("server: limit %s is negative", name)
		}
	}
	if l.RequestBytes != 0 && l.RequestBytes < 4<<10 {
		return fmt.Errorf("server: limit request-bytes=%d is below its floor of 4096 (a request must fit a lock name, a lease id and a header)", l.RequestBytes)
	}
	if l.Rate > 0 && l.Burst < 1 {
		return errors.New("server: limit rate is set but burst is 0; a burst of at least 1 is needed")
	}
	if err := l.validateMeters(); err != nil {
		return err
	}
	return nil
}

// Exhausted is the refusal of limit name: it says what ran out and how to
// raise it.
func Exhausted(name string, format string, args ...any) *api.Error {
	return api.Errorf(api.CodeResourceExhausted, "%s; raise it with serve --limit %s=N", fmt.Sprintf(format, args...), name)
}
