package main

import (
	"context"
	"math"
	"os"
	"os/exec"
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
