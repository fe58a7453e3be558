package metrics

import (
	"context"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
)

func methodOf(procedure string) string { return procedure[strings.LastIndexByte(procedure, '/')+1:] }

func (m *Metrics) count(ctx context.Context, procedure string, err error) {
	code := "ok"
	if err != nil {
		code = string(api.CodeOf(err))
	}
	m.rpcs.WithLabelValues(methodOf(procedure), code).Inc()
	if m.noteCode != nil {
		m.noteCode(ctx, code)
	}
}

// Interceptor counts RPCs by method and code, times unary RPCs, counts
// open keepalive streams and tells Config.NoteCode the code.
func (m *Metrics) Interceptor() connect.Interceptor { return rpcCounter{m} }

type rpcCounter struct{ m *Metrics }

func (c rpcCounter) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		res, err := next(ctx, req)
		c.m.ObserveOp(ctx, req.Spec().Procedure, start, err)
		return res, err
	}
}

// ObserveOp times and counts one operation that started at start: a unary
// RPC, or one message of a LockStream as the unary procedure proc.
func (m *Metrics) ObserveOp(ctx context.Context, proc string, start time.Time, err error) {
	m.rpcSeconds.WithLabelValues(methodOf(proc)).Observe(time.Since(start).Seconds())
	m.count(ctx, proc, err)
}

func (c rpcCounter) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c rpcCounter) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if methodOf(conn.Spec().Procedure) == "KeepAliveStream" {
			c.m.keepaliveStreams.Inc()
			defer c.m.keepaliveStreams.Dec()
		}
		err := next(ctx, conn)
		c.m.count(ctx, conn.Spec().Procedure, err)
		return err
	}
}
