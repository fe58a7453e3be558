package membership

import (
	"context"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
)

// ClusterCheck returns the connect interceptor that refuses, with
// permission-denied, a request forwarded by a node of another cluster (its
// ClusterIDHeader names another id). forwardedBy is the header that names
// the forwarding node, quoted in the refusal and the log line.
func (m *Manager) ClusterCheck(forwardedBy string) connect.Interceptor {
	return clusterCheck{m: m, forwardedBy: forwardedBy}
}

type clusterCheck struct {
	m           *Manager
	forwardedBy string
}

func (c clusterCheck) check(h interface{ Get(string) string }) error {
	node := c.m.node
	if id := h.Get(ClusterIDHeader); id != "" && id != node.ClusterID() {
		by := h.Get(c.forwardedBy)
		c.m.cfg.Logger.Warn("refused a request forwarded from another cluster", "from_node", by, "from_cluster", id, "cluster", node.ClusterID())
		return api.ToConnect(api.Errorf(api.CodePermissionDenied, "request forwarded by node %q of cluster %s; node %s is in cluster %s", by, id, node.ID(), node.ClusterID()))
	}
	return nil
}

func (c clusterCheck) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := c.check(req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (c clusterCheck) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c clusterCheck) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := c.check(conn.RequestHeader()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
