package server_test

import (
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// scrape returns /metrics as text.
func scrape(t *testing.T, c *servertest.Cluster) string {
	t.Helper()
	code, body := httpGet(t, c.HTTP, c.URL+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d", code)
	}
	return body
}

// sample returns the value of the sample line that starts with series.
func sample(t *testing.T, metrics, series string) string {
	t.Helper()
	for line := range strings.Lines(metrics) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return strings.TrimSpace(rest)
		}
	}
	t.Fatalf("/metrics has no sample %s", series)
	return ""
}

// busy makes one of everything the metrics count: a held lock with a
// queued waiter, an accepted and a refused fenced write.
func busy(t *testing.T, c *servertest.Cluster) {
	t.Helper()
	a := newSession(t, c.Client, 60_000, "A")
	b := newSession(t, c.Client, 60_000, "B")
	h := acquire(t, c.Client, "m:1", a.GetLeaseId())
	res, err := c.Server().Node().Apply(ctxT(t), &fsmpb.Command{Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{Name: "m:1", LeaseId: b.GetLeaseId(), WaitId: 9}}})
	if err != nil || !res.Queued {
		t.Fatalf("queue B: %v %v", res, err)
	}
	_, err = c.Client.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: "m:k", Value: []byte("v"), Token: h.GetToken()}))
	mustOK(t, "KvPut", err)
	h2 := acquire(t, c.Client, "m:2", a.GetLeaseId())
	_, err = c.Client.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: "m:k", Value: []byte("v2"), Token: h2.GetToken()}))
	mustOK(t, "KvPut 2", err)
	_, err = c.Client.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: "m:k", Value: []byte("late"), Token: h.GetToken()}))
	if err == nil {
		t.Fatal("stale KvPut accepted")
	}
}

// TestMetricsGauges: the gauges read the applied state and raft.
func TestMetricsGauges(t *testing.T) {
	t.Parallel()
	c := servertest.Start(t, servertest.Options{})
	busy(t, c)
	m := scrape(t, c)
	for series, want := range map[string]string{
		"leasehold_sessions":                              "2",
		"leasehold_locks_held":                            "2",
		"leasehold_waiters":                               "1",
		"leasehold_token":                                 "2",
		"leasehold_raft_last_contact_seconds":             "0",
		`leasehold_kv_writes_total{result="accepted"}`:    "2",
		`leasehold_kv_writes_total{result="stale-token"}`: "1",
	} {
		if got := sample(t, m, series); got != want {
			t.Errorf("%s = %s, want %s", series, got, want)
		}
	}
	if sample(t, m, "leasehold_raft_term") == "0" || sample(t, m, "leasehold_raft_applied_index") == "0" {
		t.Errorf("raft term or applied index is 0")
	}
	// Raft counts an entry applied once its leader loop has handed it to
	// the state machine, which may answer the write first: a scrape right
	// after the last write can see applied one behind. A quiet leader's
	// applied index reaches the commit index.
	var commit, applied string
	err := servertest.Eventually(5*time.Second, func() bool {
		q := scrape(t, c)
		commit, applied = sample(t, q, "leasehold_raft_commit_index"), sample(t, q, "leasehold_raft_applied_index")
		return commit == applied
	})
	if err != nil {
		t.Errorf("a quiet leader has applied index %s != commit index %s", applied, commit)
	}
	for _, want := range []string{
		`leasehold_build_info{commit="`,
		`leasehold_rpc_duration_seconds_count{method="KvPut"} 3`,
		"leasehold_raft_log_append_seconds_count ",
		"leasehold_fsm_apply_seconds_count ",
		"go_goroutines ",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestGrafanaDashboardMetricsExported: every metric the Grafana dashboard
// in deploy/grafana queries is exported by a running server.
func TestGrafanaDashboardMetricsExported(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../deploy/grafana/leasehold.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Query any }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("deploy/grafana/leasehold.json: %v", err)
	}
	name := regexp.MustCompile(`\b(?:leasehold|go|process)_[a-z0-9_]+`)
	var used []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			used = append(used, name.FindAllString(tg.Expr, -1)...)
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(string); ok {
			used = append(used, name.FindAllString(q, -1)...)
		}
	}
	slices.Sort(used)
	used = slices.Compact(used)
	if len(used) < 20 {
		t.Fatalf("the dashboard uses only %d metrics: %v", len(used), used)
	}

	c := servertest.Start(t, servertest.Options{})
	busy(t, c)
	exported := map[string]bool{}
	for line := range strings.Lines(scrape(t, c)) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, _, _ := strings.Cut(line, " ")
		series, _, _ = strings.Cut(series, "{")
		exported[series] = true
	}
	for _, n := range used {
		if !exported[n] {
			t.Errorf("the dashboard queries %s, which /metrics does not export", n)
		}
	}
}
