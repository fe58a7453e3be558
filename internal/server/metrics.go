package server

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/fsm"
)

// metrics are the server's Prometheus metrics, registered on the
// Registerer from Config (never globally).
type metrics struct {
	rpcs         *prometheus.CounterVec
	events       *prometheus.CounterVec
	applySeconds prometheus.Histogram
	forwarded    prometheus.Counter
	leader       prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_rpc_total", Help: "RPCs served, by method and leasehold code (ok on success).",
		}, []string{"method", "code"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_lock_events_total", Help: "Lock events applied by this node, by type (acquired, released, expired, ...).",
		}, []string{"type"}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "leasehold_apply_seconds", Help: "Time from proposing a command to its apply on the leader.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_forwarded_total", Help: "Requests this follower forwarded to the leader.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasehold_is_leader", Help: "1 while this node is the Raft leader.",
		}),
	}
	for _, c := range []prometheus.Collector{m.rpcs, m.events, m.applySeconds, m.forwarded, m.leader} {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(errors.New("server: register metrics"), err)
		}
	}
	return m, nil
}

func (m *metrics) observe(res *fsm.Result) {
	for _, ev := range res.Events {
		m.events.WithLabelValues(strings.ToLower(strings.TrimPrefix(ev.Type.String(), "EVENT_TYPE_"))).Inc()
	}
}

func (m *metrics) count(procedure string, err error) {
	method := procedure[strings.LastIndexByte(procedure, '/')+1:]
	code := "ok"
	if err != nil {
		code = string(api.CodeOf(err))
	}
	m.rpcs.WithLabelValues(method, code).Inc()
}

// interceptor counts RPCs by method and code.
func (m *metrics) interceptor() connect.Interceptor { return rpcCounter{m} }

type rpcCounter struct{ m *metrics }

func (c rpcCounter) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		c.m.count(req.Spec().Procedure, err)
		return res, err
	}
}

func (c rpcCounter) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c rpcCounter) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		err := next(ctx, conn)
		c.m.count(conn.Spec().Procedure, err)
		return err
	}
}
