// Package server is leasehold's RPC edge: it decodes and validates every
// request, proposes commands through raftnode, maps results and errors to
// API codes, forwards writes from a follower to the leader, and serves the
// gRPC, gRPC-Web and Connect (HTTP/JSON) protocols on one port. Business
// rules live in fsm (state) and lessor (time), not here.
package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/internal/admission"
	"github.com/leasehold/leasehold/internal/authedge"
	"github.com/leasehold/leasehold/internal/clock"
	"github.com/leasehold/leasehold/internal/failpoint"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/httpedge"
	"github.com/leasehold/leasehold/internal/hub"
	"github.com/leasehold/leasehold/internal/lessor"
	"github.com/leasehold/leasehold/internal/lockstream"
	"github.com/leasehold/leasehold/internal/membership"
	"github.com/leasehold/leasehold/internal/metrics"
	"github.com/leasehold/leasehold/internal/raftnode"
	"github.com/leasehold/leasehold/internal/validate"
	"github.com/leasehold/leasehold/internal/web"
	"github.com/leasehold/leasehold/sequencer"
)

// Peer is one voter of a cluster being bootstrapped.
type Peer = raftnode.Peer

// Config configures a Server.
type Config struct {
	// Raft configures the node (id, data dir, raft address, bootstrap).
	Raft raftnode.Config
	// Lessor configures the leader's timers. Its Grace defaults (when zero)
	// to twice Raft.LeaderLeaseTimeout, a failover margin (safety does not
	// rest on it: every renewal is confirmed, see package lessor). Its
	// Clock is the server's clock; its Confirmer is the node.
	Lessor lessor.Config
	// APIAddr is the host:port other nodes use to reach this node's API; it
	// is registered in the replicated state so followers can forward to
	// the leader. Required.
	APIAddr string
	// Limits bound what this node accepts from clients (DefaultLimits).
	Limits admission.Limits
	// Join is the API address of a running member; when set, this node
	// starts without bootstrapping and asks that member to add it. With
	// Raft.Bootstrap as well, the node founds the cluster of the list if it
	// was never formed and otherwise joins it through Join.
	Join string
	// Registerer receives the server's metrics; nil uses a private registry.
	Registerer prometheus.Registerer
	// Gatherer serves /metrics; nil uses the private registry (or none).
	Gatherer prometheus.Gatherer
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// TLS, when set, makes Serve speak TLS only (httpedge.Serve).
	TLS *tls.Config
	// PeerClientTLS, when set, is the TLS configuration of calls to other nodes
	// (httpedge.PeerClient); the node secret is never sent on a cleartext
	// connection by a node that has one (httpedge.WithNodeSecret).
	PeerClientTLS *tls.Config
	// Signer, when set, signs the grants of sessions that ask for sequencers (sequencer.go).
	Signer *sequencer.Signer
	// AccessLog, when set, gets one line per HTTP request and RPC.
	AccessLog *slog.Logger
	// WatchHistory is how many of the latest events a node keeps for
	// Watch.from_index; a watcher may fall half of it behind. Default
	// DefaultWatchHistory.
	WatchHistory int
	// WatchProgressInterval is how long a Watch stream that asked for
	// progress stays idle before it is sent the applied index. Default 1 s.
	WatchProgressInterval time.Duration
	// Admins are principals (certificate CN or token principal) that are
	// admins whatever the policies say: the bootstrap path of auth (internal/authedge).
	Admins []string
	// NodeSecret, when set, is a secret shared by every node of the cluster:
	// a caller presenting it is a node (internal/authedge). For clusters without
	// mutual TLS between nodes.
	NodeSecret string
	// Pprof serves net/http/pprof under /debug/pprof/ on the API address.
	// Default off: profiles expose internals and cost CPU while they run.
	Pprof bool
}

// DefaultWatchHistory is the default of Config.WatchHistory.
const DefaultWatchHistory = 10000

// DefaultConfig returns a single-node configuration for dataDir.
func DefaultConfig(dataDir, apiAddr string) Config {
	rc := raftnode.DefaultConfig()
	rc.DataDir = dataDir
	rc.Logger = nil // Open uses Config.Logger
	lc := lessor.DefaultConfig()
	lc.Grace = 0 // Open: twice the leader-lease timeout
	lc.Logger = nil
	return Config{Raft: rc, Lessor: lc, APIAddr: apiAddr, Limits: admission.DefaultLimits(), Logger: slog.Default()}
}

// Server is one leasehold node's API.
type Server struct {
	cfg    Config
	clock  clock.Clock
	node   *raftnode.Node
	lessor *lessor.Lessor
	hub    *hub.Hub
	feed   *web.Feed           // the dashboard's event feed
	work   *lockstream.Workers // run the messages of every LockStream
	met    *metrics.Metrics
	lim    *admission.Limiter
	rides  rides          // queued acquires waiting for a release (ride.go)
	http   *http.Client   // for forwarding to the leader
	edge   *authedge.Edge // authentication and authorization (auth.go)
	audit  *slog.Logger   // the audit lines (component=audit)

	members *membership.Manager // joins, promotion, the member list (cluster.go)

	mu      sync.Mutex // protects following
	clients map[string]leaseholdv1connect.LeaseholdServiceClient
	closed  bool

	stop chan struct{}
	wg   sync.WaitGroup

	// elected wakes registerLoop when this node becomes the leader, so that
	// it registers its API address at once (followers cannot forward
	// before, and are not ready).
	elected chan struct{}

	// drain is closed when Serve starts shutting down, or by Close: calls
	// that may wait without bound (a queued Acquire, a Watch) then end with
	// unavailable instead of holding the graceful shutdown open.
	drain     chan struct{}
	drainOnce sync.Once
}

// Open starts the node and its lessor. The returned Server serves nothing
// until Handler's result is mounted on an HTTP server (see Serve).
func Open(cfg Config) (*Server, error) {
	if cfg.APIAddr == "" {
		return nil, errors.New("server: APIAddr is empty")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Lessor.Clock == nil {
		cfg.Lessor.Clock = clock.Real{}
	}
	if cfg.WatchHistory <= 0 {
		cfg.WatchHistory = DefaultWatchHistory
	}
	if cfg.WatchProgressInterval <= 0 {
		cfg.WatchProgressInterval = time.Second
	}
	if cfg.Lessor.Grace == 0 {
		cfg.Lessor.Grace = 2 * cfg.Raft.LeaderLeaseTimeout
	}
	if cfg.Lessor.Logger == nil {
		cfg.Lessor.Logger = cfg.Logger
	}
	if cfg.Raft.Logger == nil {
		cfg.Raft.Logger = cfg.Logger
	}
	reg := cfg.Registerer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, cfg.Gatherer = r, r
	}
	s := &Server{
		cfg:     cfg,
		clock:   cfg.Lessor.Clock,
		hub:     hub.New(cfg.WatchHistory),
		feed:    web.NewFeed(),
		clients: map[string]leaseholdv1connect.LeaseholdServiceClient{},
		http:    httpedge.WithNodeSecret(httpedge.PeerClient(cfg.PeerClientTLS), cfg.NodeSecret),
		stop:    make(chan struct{}),
		elected: make(chan struct{}, 1),
		drain:   make(chan struct{}),
	}
	s.work = lockstream.NewWorkers(s.stop)
	s.audit = cfg.Logger.With("component", "audit")
	s.edge = newEdge(s)
	met, err := metrics.New(metrics.Config{Registerer: reg, State: metricsState{s}, NoteCode: httpedge.NoteCode})
	if err != nil {
		return nil, errors.Join(errors.New("server: register metrics"), err)
	}
	s.met = met
	if s.lim, err = admission.New(cfg.Limits, cfg.Lessor.Clock, reg); err != nil {
		return nil, err
	}
	cfg.Lessor.Confirmer = confirmer{s}
	if s.lessor, err = lessor.New(cfg.Lessor, proposer{s}); err != nil {
		return nil, err
	}
	cfg.Raft.Now = cfg.Lessor.Clock.Now
	if cfg.Join != "" && len(cfg.Raft.Bootstrap) > 0 {
		// Found the cluster of the list if it was never formed, else join
		// it through cfg.Join (raftnode.Config.Rejoin).
		// A founder (or a member restarted with its data) registers with
		// the leader it knows; only a node that rejoined asks cfg.Join.
		joinCfg := cfg
		s.cfg.Join = ""
		cfg.Raft.Rejoin = func() (string, error) {
			s.cfg.Join = joinCfg.Join
			return join(joinCfg)
		}
	} else {
		cfg.Raft.Join = cfg.Join != ""
		if err := prepareJoin(&cfg); err != nil {
			s.lessor.Close()
			return nil, err
		}
	}
	cfg.Raft.Observer = s.observe
	cfg.Raft.OnRestore = func(at uint64) { s.hub.Restored(at); s.lim.Restored(); s.edge.Observe(nil) }
	cfg.Raft.Metrics = met
	cfg.Raft.OnLeadership = s.onLeadership
	if s.node, err = raftnode.Open(cfg.Raft); err != nil {
		s.lessor.Close()
		return nil, err
	}
	s.hub.SetRaftApplied(s.node.Raft().AppliedIndex)
	if err := s.openMembership(); err != nil {
		s.lessor.Close()
		_ = s.node.Close()
		return nil, err
	}
	if err := s.met.RegisterStateGauges(); err != nil {
		s.lessor.Close()
		_ = s.node.Close()
		return nil, err
	}
	s.edge.Observe(nil) // read the state replayed by Open
	s.wg.Go(s.registerLoop)
	if !s.node.Standalone() {
		// A standalone node cannot grow, so it never has a non-voter to
		// promote; an idle one is spared the loop's wake-ups.
		s.wg.Go(func() { s.members.PromoteLoop(s.stop) })
	}
	return s, nil
}

// WaitLeader waits until some node (this one or another) is known to lead.
func (s *Server) WaitLeader(ctx context.Context) error {
	for {
		if id, _ := s.node.Leader(); id != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return api.Errorf(api.CodeUnavailable, "no leader elected: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Node returns the raft node (tests and cluster administration).
func (s *Server) Node() *raftnode.Node { return s.node }

// Close stops the lessor and the node. It is idempotent and waits.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	s.mu.Unlock()
	s.startDrain()
	s.wg.Wait()
	s.lessor.Close()
	err := s.node.Close()
	s.http.CloseIdleConnections()
	return err
}

func (s *Server) startDrain() {
	s.drainOnce.Do(func() {
		s.node.Stopping()
		close(s.drain)
	})
}

// observe runs after every applied entry, on every node.
func (s *Server) observe(index uint64, res *fsm.Result) {
	s.lessor.Observe(res)
	s.lim.SessionsEnded(res.EndedSessions)
	s.edge.Observe(res)
	s.hub.Publish(index, res.Events)
	s.met.Observe(res)
	s.publishWeb(index, res)
}

func (s *Server) onLeadership(leader bool) {
	s.met.SetLeader(leader)
	if !leader {
		s.lessor.Demote()
		return
	}
	select {
	case s.elected <- struct{}{}:
	default:
	}
	PromoteLessor(s.node, s.lessor)
}

// registerLoop records this node's API address in the replicated state, so
// that followers can forward to it when it leads. It retries until done,
// every 500 ms and whenever this node is elected.
func (s *Server) registerLoop() {
	for {
		var have string
		s.node.Read(func(m *fsm.Machine) { have = m.NodeAPIAddr(s.node.ID()) })
		if have == s.cfg.APIAddr {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := s.register(ctx)
		cancel()
		if err != nil {
			s.cfg.Logger.Debug("register API address", "err", err)
		}
		select {
		case <-s.stop:
			return
		case <-s.elected:
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (s *Server) register(ctx context.Context) error {
	if s.node.IsLeader() {
		_, err := s.node.Apply(ctx, &fsmpb.Command{UnixMs: s.clock.Now().UnixMilli(), Op: &fsmpb.Command_RegisterNode{RegisterNode: &fsmpb.RegisterNode{Id: s.node.ID(), ApiAddr: s.cfg.APIAddr}}})
		return err
	}
	addr, err := s.leaderAPIAddr()
	if err != nil {
		if s.cfg.Join == "" {
			return err
		}
		addr = s.cfg.Join // not a member yet: ask the member we were told of
	}
	cc := leaseholdv1connect.NewClusterServiceClient(s.http, s.peerURL(addr), connect.WithGRPC())
	id, raftAddr := s.node.ID(), s.node.RaftAddr()
	req := connect.NewRequest(&addMemberRequest{Id: id, RaftAddr: raftAddr, ApiAddr: s.cfg.APIAddr})
	req.Header().Set(clusterIDHeader, s.node.ClusterID())
	_, err = cc.AddMember(ctx, req)
	return err
}

// confirmer adapts the node to lessor.Confirmer: every keepalive's answer
// waits for a leadership confirmation gathered after it arrived.
type confirmer struct{ s *Server }

func (c confirmer) ConfirmLeadership(ctx context.Context) error {
	return ConfirmForLessor(ctx, c.s.node)
}

// proposer adapts the server to lessor.Proposer.
type proposer struct{ s *Server }

// Propose marks the errors after which the command certainly did not
// apply (lessor.ErrNotApplied); any other error leaves the outcome unknown.
func (p proposer) Propose(ctx context.Context, cmd *fsmpb.Command) (fsm.Result, error) {
	return LessorPropose(ctx, p.s.node, cmd)
}

// apply stamps cmd with the leader's wall clock (display only), proposes it
// and maps a refusal to an API error.
func (s *Server) apply(ctx context.Context, cmd *fsmpb.Command) (fsm.Result, error) {
	cmd.UnixMs = s.clock.Now().UnixMilli()
	start := time.Now()
	admission.Yield(ctx) // the commit is a wait, not work (admission/shares.go)
	res, err := s.node.Apply(ctx, cmd)
	s.met.ObserveApply(time.Since(start))
	if err != nil {
		return res, err
	}
	failpoint.Inject(failpoint.CommitReply)
	return res, res.Err
}

func newLeaseID() string {
	var b [validate.LeaseIDLen / 2]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Handler returns the HTTP handler for every service, /metrics, the
// probes (grpc.health.v1, reflection, /healthz, /readyz) and the dashboard
// (/ui), behind the access log when Config.AccessLog is set.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// Responses under 1 KiB go uncompressed even to a client that accepts gzip.
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(int(s.cfg.Limits.RequestBytes)), connect.WithInterceptors(s.members.ClusterCheck(forwardedHeader), s.met.Interceptor(), s.edge.Interceptor()), connect.WithCompressMinBytes(1024)}
	opts = append(opts, admission.InflateLimit(s.cfg.Limits.RequestBytes)...)
	lpath, lh := leaseholdv1connect.NewLeaseholdServiceHandler(&lockService{s}, opts...)
	mux.Handle(lpath, lockstream.WithFlushGate(lh))
	mux.Handle(leaseholdv1connect.NewClusterServiceHandler(&clusterService{s}, opts...))
	mux.Handle(leaseholdv1connect.NewAuthServiceHandler(&authService{s}, opts...))
	if s.cfg.Gatherer != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET "+httpedge.TokenCounterPath, httpedge.TokenCounter(tokenNode{s}, s.http))
	mux.HandleFunc("GET "+KeysPath, s.serveKeys)
	httpedge.MountProbes(mux, prober{s})
	ui := web.Handler(s.webSource(), s.feed, s.drain) // decides per caller (web.go)
	mux.Handle("/ui/", ui)
	mux.Handle("/ui", ui)
	if s.cfg.Pprof {
		pm := http.NewServeMux()
		httpedge.MountPprof(pm)
		mux.Handle("/debug/pprof/", s.edge.AdminOnly(pm))
	}
	named := func(r *http.Request) string { return principalOf(r, s.mayForward) }
	browser := httpedge.BrowserCheckConfig{AuthOn: func() bool { return s.edge.Policies().On() }, APIAddr: s.cfg.APIAddr, Audit: s.audit, Deny: authedge.WriteDenied}
	var hd http.Handler = s.lim.Handler(httpedge.BrowserCheck(browser, mux), named)
	hd = s.edge.Authenticate(hd)   // before the limits: they count the authenticated principal
	hd = admission.ConnRefusal(hd) // a connection refused after its TLS handshake
	if s.cfg.AccessLog != nil {
		hd = httpedge.AccessLog(s.cfg.AccessLog, hd)
	}
	return hd
}

// Serve serves Handler on ln (HTTP/1.1 and cleartext HTTP/2, as gRPC
// needs) until ctx ends, then shuts down gracefully. When the data dir
// refuses a write (a full disk), it shuts down the same way and returns
// an unavailable error that says so.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs, ln := s.limited(NewHTTPServer(s.Handler()), ln)
	errc := make(chan error, 1)
	go func() { errc <- httpedge.Serve(hs, ln, s.cfg.TLS, s.cfg.Logger) }()
	var failed error
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	case <-s.node.Failed():
		failed = api.Errorf(api.CodeUnavailable, "node %s stopped: %v", s.node.ID(), s.node.StorageErr())
	}
	s.startDrain()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	<-errc
	return failed
}

// NewHTTPServer returns an http.Server for h speaking HTTP/1.1 and cleartext
// HTTP/2 with prior knowledge (what gRPC clients use on http:// addresses).
func NewHTTPServer(h http.Handler) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{Handler: h, Protocols: &p, ReadHeaderTimeout: 10 * time.Second}
}
