package main

import (
	"strings"
	"testing"
)

// The ratio columns set leasehold against every other system, or, when the
// working tree's leasehold did not run, the first leasehold@REV: two builds
// side by side get a ratio too.
func TestTableRatios(t *testing.T) {
	pairs := func(v float64) []metric {
		return []metric{{Workload: "uncontended C=64", Name: "pairs/s", Value: v, Higher: true}}
	}
	for _, c := range []struct {
		name    string
		systems []string
		values  []float64
		want    []string // cells of the ratio columns, header then value
		notWant string
	}{
		{"working tree", []string{"etcd", "leasehold", "leasehold@abc"}, []float64{100, 300, 200},
			[]string{"| leasehold / etcd | leasehold / leasehold@abc |", "| 3.00 | 1.50 |"}, "etcd / "},
		{"two builds", []string{"leasehold@new", "leasehold@old", "etcd"}, []float64{120, 100, 40},
			[]string{"| leasehold@new / leasehold@old | leasehold@new / etcd |", "| 1.20 | 3.00 |"}, "leasehold@old / "},
		{"no leasehold", []string{"etcd", "redis"}, []float64{100, 50}, []string{"| etcd | redis |\n"}, " / "},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &results{Higher: map[key]bool{}, Values: map[key]map[string][]float64{}}
			for i, s := range c.systems {
				r.add(s, pairs(c.values[i]))
			}
			tab := r.table()
			for _, w := range c.want {
				if !strings.Contains(tab, w) {
					t.Errorf("table lacks %q:\n%s", w, tab)
				}
			}
			if strings.Contains(tab, c.notWant) {
				t.Errorf("table has %q:\n%s", c.notWant, tab)
			}
		})
	}
}
