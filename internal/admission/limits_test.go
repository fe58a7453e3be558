package admission

import "testing"

func mustOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestMeterLimitsSetAndValidate: the meters are limits like the others:
// named in serve --limit, with their defaults, and a rate without a
// burst is refused.
func TestMeterLimitsSetAndValidate(t *testing.T) {
	def := DefaultLimits()
	for name, want := range map[string]string{"list-rate": "10000", "list-burst": "20000", "watch-open-rate": "100", "watch-open-burst": "512", "renew-rate": "60000", "renew-burst": "60000"} {
		if got := def.Get(name); got != want {
			t.Errorf("default %s = %q, want %q", name, got, want)
		}
	}
	l := DefaultLimits()
	for _, name := range []string{"list-rate", "list-burst", "watch-open-rate", "watch-open-burst", "renew-rate", "renew-burst"} {
		mustOK(t, name, l.Set(name, "7"))
	}
	if l.ListRate != 7 || l.ListBurst != 7 || l.WatchOpenRate != 7 || l.WatchOpenBurst != 7 || l.RenewRate != 7 || l.RenewBurst != 7 {
		t.Fatalf("Set gave %+v", l)
	}
	for _, bad := range []func(*Limits){
		func(l *Limits) { l.ListBurst = 0 },
		func(l *Limits) { l.WatchOpenBurst = 0 },
		func(l *Limits) { l.RenewBurst = 0 },
		func(l *Limits) { l.RenewRate = -1 },
	} {
		l := DefaultLimits()
		bad(&l)
		if l.Validate() == nil {
			t.Errorf("Validate accepted %+v", l)
		}
	}
	off := DefaultLimits()
	off.ListRate, off.ListBurst = 0, 0
	mustOK(t, "list-rate=0 turns it off", off.Validate())
}
