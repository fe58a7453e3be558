package main

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// key names one figure of one workload.
type key struct{ Workload, Name string }

// results holds every round's figures per system.
type results struct {
	Command, Machine, Date, Commit string
	LoadStart                      string // 1-minute load average when the run began
	Rounds                         int
	Cluster                        bool     // 3-node clusters: cluster.md, cluster-*.png
	Systems                        []string // that ran, in order
	Skipped                        []string // why a system did not run
	Keys                           []key    // in the order measured
	Higher                         map[key]bool
	Values                         map[key]map[string][]float64 // system → one value per round
}

func newResults(o options) *results {
	return &results{
		Machine: machine(), LoadStart: loadavg(), Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Commit: commit(o.src),
		Rounds: o.rounds, Cluster: o.cluster, Higher: map[key]bool{}, Values: map[key]map[string][]float64{},
	}
}

func (r *results) add(sys string, ms []metric) {
	if !slices.Contains(r.Systems, sys) {
		r.Systems = append(r.Systems, sys)
	}
	for _, m := range ms {
		k := key{m.Workload, m.Name}
		if r.Values[k] == nil {
			r.Keys = append(r.Keys, k)
			r.Values[k] = map[string][]float64{}
			r.Higher[k] = m.Higher
		}
		r.Values[k][sys] = append(r.Values[k][sys], m.Value)
	}
}

// median of sys's rounds of k; NaN when it has none.
func (r *results) median(k key, sys string) float64 {
	v := slices.Clone(r.Values[k][sys])
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func fmtVal(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case math.IsInf(v, 1):
		return "∞"
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// cell is the median and, with more than one round, the range.
func (r *results) cell(k key, sys string) string {
	v := r.Values[k][sys]
	if len(v) == 0 {
		return "–"
	}
	s := fmtVal(r.median(k, sys))
	if len(v) > 1 {
		s += fmt.Sprintf(" (%s–%s)", fmtVal(slices.Min(v)), fmtVal(slices.Max(v)))
	}
	return s
}

// base is the system the ratio columns set against each other one:
// leasehold (a build of the working tree) when it ran, else the first
// leasehold@REV, so that two builds side by side get ratios too; "" when no
// leasehold ran.
func (r *results) base() string {
	if slices.Contains(r.Systems, "leasehold") {
		return "leasehold"
	}
	for _, s := range r.Systems {
		if strings.HasPrefix(s, "leasehold@") {
			return s
		}
	}
	return ""
}

// table is the Markdown table: medians, ranges and the ratios of base to
// every other system.
func (r *results) table() string {
	var b strings.Builder
	base := r.base()
	var others []string
	if base != "" {
		others = slices.DeleteFunc(slices.Clone(r.Systems), func(s string) bool { return s == base })
	}
	b.WriteString("| workload | figure |")
	for _, s := range r.Systems {
		b.WriteString(" " + s + " |")
	}
	for _, s := range others {
		b.WriteString(" " + base + " / " + s + " |")
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---:|", len(r.Systems)+len(others)) + "\n")
	for _, k := range r.Keys {
		dir := "↓"
		if r.Higher[k] {
			dir = "↑"
		}
		fmt.Fprintf(&b, "| %s | %s %s |", k.Workload, k.Name, dir)
		for _, s := range r.Systems {
			b.WriteString(" " + r.cell(k, s) + " |")
		}
		for _, s := range others {
			b.WriteString(" " + fmtVal(r.median(k, base)/r.median(k, s)) + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// write writes results.md and the charts into dir (cluster.md and
// cluster-*.png for 3-node clusters).
func (r *results) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	md, png := "results.md", ""
	var b strings.Builder
	if r.Cluster {
		md, png = "cluster.md", "cluster-"
		fmt.Fprintf(&b, "# leasehold beside etcd: 3-node clusters\n\n")
	} else {
		fmt.Fprintf(&b, "# leasehold beside etcd and Redis\n\n")
	}
	fmt.Fprintf(&b, "- Command: `%s`\n", r.Command)
	fmt.Fprintf(&b, "- Machine: %s; 1-minute load average %s at the start, %s at the end\n- Date: %s\n- leasehold commit: %s\n", r.Machine, r.LoadStart, loadavg(), r.Date, r.Commit)
	fmt.Fprintf(&b, "- Rounds: %d, the systems in turn (%s) in every round; a cell is the median of the rounds (range in brackets). ↑: higher is better, ↓: lower is better.\n",
		r.Rounds, strings.Join(r.Systems, ", "))
	for _, s := range r.Skipped {
		fmt.Fprintf(&b, "- Not run: %s\n", s)
	}
	if r.Cluster {
		b.WriteString(clusterNotes)
	} else {
		b.WriteString(singleNotes)
	}
	b.WriteString("\n")
	b.WriteString(r.table())
	fmt.Fprintf(&b, "\n![uncontended](%[1]suncontended.png) ![contended](%[1]scontended.png) ![cpu](%[1]scpu.png)\n", png)
	if err := os.WriteFile(filepath.Join(dir, md), []byte(b.String()), 0o644); err != nil {
		return err
	}
	if err := r.lineChart(filepath.Join(dir, png+"uncontended.png"), "uncontended", "pairs/s", "acquire+release pairs/s, each worker its own name"); err != nil {
		return err
	}
	if err := r.lineChart(filepath.Join(dir, png+"contended.png"), "contended", "handoffs/s", "handoffs/s, all workers on one name"); err != nil {
		return err
	}
	return r.cpuChart(filepath.Join(dir, png+"cpu.png"))
}

// singleNotes describe the single-node setup in results.md.
const singleNotes = `- Every system durable: leasehold ` + "`serve`" + ` defaults (every raft append fsync'd before the answer);
  etcd embedded (` + "`go.etcd.io/etcd/server/v3/embed`" + ` defaults, in a process of its own) locked with
  ` + "`client/v3/concurrency`" + ` Session + Mutex; Redis with ` + "`--appendonly yes --appendfsync always`" + ` locked with
  go-redsync (key with expiry, waiters poll with redsync's default delays; no sessions, so no
  session rows).
- Server CPU is the scheduler's run time of the server process's threads
  (/proc/PID/task/*/schedstat, in nanoseconds); client CPU is the harness's own
  rusage; keepalive renewals are counted as sessions × window / (TTL/3). Client bytes/session is
  the harness's live heap and stacks after GC, per session.
- Server fsyncs/pair (and /handoff): fsync and fdatasync calls of the server process over the
  run, counted with perf's syscall tracepoints (the row is left out where perf cannot attach).
  A handoff needs at least one: the release that grants the next waiter is durable before
  that waiter is answered, and its release cannot come before.
- Holder crash: the holder stops renewing right after its acquire; the figure is how long past
  its TTL, counted from the crash, the queued waiter got the lock.
`

// clusterNotes describe the 3-node setup in cluster.md.
const clusterNotes = `- Every system durable: leasehold ` + "`serve`" + ` defaults (every raft append fsync'd before the
  answer); etcd embedded (` + "`go.etcd.io/etcd/server/v3/embed`" + ` defaults) locked with
  ` + "`client/v3/concurrency`" + ` Session + Mutex.
- 3-node clusters on 127.0.0.1, every node a process of its own with its own data dir, on
  the same 2 cores as the clients: three ` + "`leasehold serve --node-id nI --raft-addr … --bootstrap …`" + `
  (durable defaults; heartbeat and election timeouts 500 ms) and three embedded etcd members
  (` + "`embed`" + ` defaults: heartbeat 100 ms, election timeout 1 s), each member the harness's
  binary started again as a process of its own. The clients get every node's endpoint
  (leasehold's client fails over between them; etcd's balances over them).
- Server CPU is the scheduler's run time of the three server processes' threads
  (/proc/PID/task/*/schedstat), summed; client CPU is
  the harness's own rusage. Server fsyncs/pair (and /handoff): fsync and fdatasync calls of the
  three server processes over the run, counted with perf's syscall tracepoints (the row is left
  out where perf cannot attach).
- Leader kill: a client holds a session (TTL 10 s) and has acquired once; the leader's process
  (leasehold: the node ` + "`cluster members`" + ` names leader; etcd: the member whose status names
  itself leader) is killed with SIGKILL, and the client at once tries to acquire a free name,
  each attempt bounded by 1 s (etcd's election timeout), until one succeeds (a new session if
  its own was lost). With a 5 s bound, etcd's first attempt after the kill ran out the whole
  5 s (its ` + "`Mutex.Lock`" + ` got no answer while the members elected), so the figure was the bound. The
  figure is the time from the kill to that acquire's answer; the killed node is started again
  with its data and the cluster waited for before the next trial. Median and max of the
  trials of a round; the cell is the median (range) of the rounds.
`

// lineChart plots figure name of the workloads "<prefix> C=N" against N,
// one line per system.
func (r *results) lineChart(file, prefix, name, title string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "concurrent workers (C)"
	p.Y.Label.Text = name
	var args []any
	for _, s := range r.Systems {
		var pts plotter.XYs
		for _, k := range r.Keys {
			c, ok := strings.CutPrefix(k.Workload, prefix+" C=")
			if !ok || k.Name != name {
				continue
			}
			n, err := strconv.Atoi(c)
			if v := r.median(k, s); err == nil && !math.IsNaN(v) {
				pts = append(pts, plotter.XY{X: float64(n), Y: v})
			}
		}
		if len(pts) > 0 {
			args = append(args, s, pts)
		}
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	p.Legend.Top = true
	return p.Save(16*vg.Centimeter, 10*vg.Centimeter, file)
}

// cpuChart plots CPU per operation (server+client) for each system.
func (r *results) cpuChart(file string) error {
	var ks []key
	for _, k := range r.Keys {
		if strings.HasPrefix(k.Name, "CPU µs/pair") || strings.HasPrefix(k.Name, "keepalive CPU µs/renewal") {
			ks = append(ks, k)
		}
	}
	p := plot.New()
	p.Title.Text = "CPU µs per operation, server + client (lower is better)"
	w := vg.Points(12)
	var names []string
	for _, k := range ks {
		names = append(names, strings.TrimPrefix(strings.Replace(k.Workload, "sessions, a lock each", "sessions: renewal", 1), "uncontended "))
	}
	for i, s := range r.Systems {
		vals := make(plotter.Values, len(ks))
		for j, k := range ks {
			if v := r.median(k, s); !math.IsNaN(v) && !math.IsInf(v, 0) {
				vals[j] = v
			}
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Color = color.Black
		bars.Offset = w * vg.Length(float64(i)-float64(len(r.Systems)-1)/2)
		p.Add(bars)
		p.Legend.Add(s, bars)
	}
	p.Legend.Top = true
	p.NominalX(names...)
	return p.Save(16*vg.Centimeter, 10*vg.Centimeter, file)
}

// machine describes the CPU, core count, kernel and Go version.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	kernel := "?"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%s, %d cores, Linux %s, %s", model, runtime.NumCPU(), kernel, runtime.Version())
}

// loadavg is the 1-minute load average (other work on the machine).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}

// commit names the commit the measured leasehold was built from, with
// "-dirty" when the tree's Go code or modules differ from it (the
// harness's own output, docs/bench, does not count).
func commit(src string) string {
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = src
		out, err := cmd.Output()
		return string(bytes.TrimSpace(out)), err
	}
	rev, err := git("rev-parse", "--short", "HEAD")
	if err != nil {
		return "unknown"
	}
	if changed, err := git("status", "--porcelain", "--", "*.go", "go.mod", "go.sum"); err != nil || changed != "" {
		rev += "-dirty"
	}
	return rev
}
