package main

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// The etcd server is this test binary, started again with etcdChildEnv.
	if spec := os.Getenv(etcdChildEnv); spec != "" {
		if err := runEtcdChild(spec); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSmoke runs every workload with tiny counts against every system and
// checks that each ran and that every counter is sane. It asserts nothing
// about speed.
func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	o := options{smoke: true, rounds: 1, systems: []string{"leasehold", "etcd", "redis"}, src: "..", p: smokeParams()}
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server is not on PATH; CI installs it (scripts/ci-services.sh)")
		}
		o.systems = o.systems[:2]
	}
	res, err := run(ctx, o, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Systems) != len(o.systems) {
		t.Fatalf("systems that ran: %v, want %v", res.Systems, o.systems)
	}
	for _, k := range res.Keys {
		for _, sys := range res.Systems {
			vals := res.Values[k][sys]
			if len(vals) == 0 {
				continue // a workload the system has no form of (Redis has no sessions)
			}
			v := vals[0]
			switch {
			case k.Name == "sessions lost":
				if v != 0 {
					t.Errorf("%s: %s: %v sessions lost", sys, k.Workload, v)
				}
			case k.Name == "fairness max/min per worker":
				if !(v >= 1) { // ∞ when a worker got none in a tiny run
					t.Errorf("%s: %s: fairness %v", sys, k.Workload, v)
				}
			case strings.Contains(k.Name, "after TTL"):
				// Never before the TTL (allowing for one acquire round trip
				// between the holder's last renewal and the crash), and
				// within the bound the waiter had.
				if v < -50 || v > 10*smokeParams().CrashTTL.Seconds()*1000 {
					t.Errorf("%s: %s: %s = %v", sys, k.Workload, k.Name, v)
				}
			case k.Name == "client bytes/session":
				// A heap difference over a smoke run's few sessions is mostly
				// GC noise and may come out negative; it must be a number.
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("%s: %s: %s = %v", sys, k.Workload, k.Name, v)
				}
			case math.IsNaN(v) || math.IsInf(v, 0) || v < 0:
				t.Errorf("%s: %s: %s = %v", sys, k.Workload, k.Name, v)
			case res.Higher[k] && v <= 0: // every throughput counted some operations
				t.Errorf("%s: %s: %s = %v", sys, k.Workload, k.Name, v)
			}
		}
		if len(res.Values[k]["leasehold"]) == 0 || len(res.Values[k]["etcd"]) == 0 {
			t.Errorf("%s %s: not measured for leasehold and etcd: %v", k.Workload, k.Name, res.Values[k])
		}
	}
	for _, want := range []string{"uncontended C=1", "contended C=2", "sessions, a lock each", "lease churn", "holder crash"} {
		found := false
		for _, k := range res.Keys {
			found = found || strings.HasPrefix(k.Workload, want) || strings.Contains(k.Workload, want)
		}
		if !found {
			t.Errorf("workload %q did not run", want)
		}
	}
	if tab := res.table(); !strings.Contains(tab, "leasehold / etcd") {
		t.Errorf("table has no ratio column:\n%s", tab)
	}
	if err := res.write(t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

// TestSmokeCluster runs the 3-node rows with tiny counts against leasehold
// and etcd clusters (one leader kill each) and checks that both ran every
// workload and that every counter is sane. It asserts nothing about speed.
func TestSmokeCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	o := options{smoke: true, cluster: true, rounds: 1, systems: []string{"leasehold", "etcd", "redis"}, src: "..", p: smokeClusterParams()}
	res, err := run(ctx, o, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"leasehold", "etcd"}; !slices.Equal(res.Systems, want) {
		t.Fatalf("systems that ran: %v, want %v", res.Systems, want)
	}
	if len(res.Skipped) != 1 || !strings.HasPrefix(res.Skipped[0], "redis:") {
		t.Errorf("skipped: %q, want redis with its reason", res.Skipped)
	}
	for _, k := range res.Keys {
		for _, sys := range res.Systems {
			vals := res.Values[k][sys]
			if len(vals) != 1 {
				t.Errorf("%s: %s %s: %d values, want 1", sys, k.Workload, k.Name, len(vals))
				continue
			}
			v := vals[0]
			switch {
			case k.Name == "fairness max/min per worker":
				if !(v >= 1) {
					t.Errorf("%s: %s: fairness %v", sys, k.Workload, v)
				}
			case strings.HasPrefix(k.Name, "first acquire after kill"):
				// After the kill, and within the harness's bound.
				if !(v > 0) || v > killWait.Seconds()*1000 {
					t.Errorf("%s: %s: %s = %v", sys, k.Workload, k.Name, v)
				}
			case math.IsNaN(v) || math.IsInf(v, 0) || v < 0:
				t.Errorf("%s: %s: %s = %v", sys, k.Workload, k.Name, v)
			case res.Higher[k] && v <= 0:
				t.Errorf("%s: %s: %s = %v", sys, k.Workload, k.Name, v)
			}
		}
	}
	for _, want := range []string{"uncontended C=1", "uncontended C=4", "contended C=2", "leader kill (SIGKILL)"} {
		if !slices.ContainsFunc(res.Keys, func(k key) bool { return k.Workload == want }) {
			t.Errorf("workload %q did not run", want)
		}
	}
	for _, k := range res.Keys {
		if strings.HasPrefix(k.Workload, "holder crash") || strings.Contains(k.Workload, "sessions") || strings.HasPrefix(k.Workload, "lease churn") {
			t.Errorf("single-node workload %q ran in cluster mode", k.Workload)
		}
	}
	t.Logf("\n%s", res.table())
	dir := t.TempDir()
	if err := res.write(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cluster.md", "cluster-uncontended.png", "cluster-contended.png", "cluster-cpu.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}
