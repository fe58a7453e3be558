package fsm

import (
	"slices"
	"strings"
	"testing"
)

// TestKVPageAndLockPage: pages follow key order after the cursor, keep
// drops keys before the limit counts them, and more says whether a
// further page exists.
func TestKVPageAndLockPage(t *testing.T) {
	r := newRig(t, DefaultLimits())
	r.must(sessions("A")...)
	for _, n := range []string{"job:1", "job:2", "job:3", "ops:1"} {
		r.must(acquire(n, "A"))
	}
	for i, k := range []string{"job:a", "job:b", "job:c", "ops:x"} {
		r.must(kvPut(k, "v", uint64(i+1)))
	}
	keys := func(kvs []string, more bool) string {
		return strings.Join(kvs, ",") + map[bool]string{true: " +more"}[more]
	}
	page := func(prefix, after string, keep func(string) bool, limit int) string {
		got, more := r.m.KVPage(prefix, after, keep, limit)
		var ks []string
		for _, kv := range got {
			ks = append(ks, kv.GetKey())
		}
		return keys(ks, more)
	}
	notB := func(k string) bool { return k != "job:b" }
	for _, c := range []struct{ got, want string }{
		{page("job:", "", nil, 2), "job:a,job:b +more"},
		{page("job:", "job:b", nil, 2), "job:c"},
		{page("", "", notB, 2), "job:a,job:c +more"},
		{page("", "job:c", notB, 2), "ops:x"},
	} {
		if c.got != c.want {
			t.Errorf("KVPage: %q, want %q", c.got, c.want)
		}
	}
	locks, more := r.m.LockPage(func(n string) bool { return strings.HasPrefix(n, "ops:") || n == "job:3" }, 10)
	names := make([]string, len(locks))
	for i, l := range locks {
		names[i] = l.Name
	}
	if !slices.Equal(names, []string{"job:3", "ops:1"}) || more {
		t.Errorf("LockPage: %v more=%v, want [job:3 ops:1] and no more", names, more)
	}
}
