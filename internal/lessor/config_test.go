package lessor

import (
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Confirmer = confirmed
	if err := ok.Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		valid  bool
	}{
		{"nil clock", func(c *Config) { c.Clock = nil }, false},
		{"negative drift", func(c *Config) { c.Drift = -0.01 }, false},
		{"zero drift", func(c *Config) { c.Drift = 0 }, true},
		{"drift 0.5", func(c *Config) { c.Drift = 0.5 }, true},
		{"drift above 0.5", func(c *Config) { c.Drift = 0.51 }, false},
		{"negative grace", func(c *Config) { c.Grace = -time.Nanosecond }, false},
		{"zero grace", func(c *Config) { c.Grace = 0 }, true},
		{"tick 1ms", func(c *Config) { c.Tick = time.Millisecond }, true},
		{"tick below 1ms", func(c *Config) { c.Tick = time.Millisecond - 1 }, false},
		{"zero tick", func(c *Config) { c.Tick = 0 }, false},
		{"max inflight 1", func(c *Config) { c.MaxInflight = 1 }, true},
		{"max inflight 0", func(c *Config) { c.MaxInflight = 0 }, false},
		{"nil logger", func(c *Config) { c.Logger = nil }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Confirmer = confirmed
			tc.mutate(&c)
			err := c.Validate()
			if (err == nil) != tc.valid {
				t.Fatalf("Validate() = %v, want valid=%v", err, tc.valid)
			}
			if _, nerr := New(c, &fakeProposer{}); (nerr == nil) != tc.valid {
				t.Fatalf("New() = %v, want valid=%v", nerr, tc.valid)
			}
		})
	}
}
