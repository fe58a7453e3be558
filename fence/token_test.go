package fence_test

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/fence"
)

func TestParseToken(t *testing.T) {
	tests := []struct {
		in   string
		want uint64 // 0: invalid
	}{
		{"1", 1},
		{"17", 17},
		{"9007199254740993", 9007199254740993}, // 2^53+1
		{"18446744073709551615", math.MaxUint64},
		{"", 0},
		{"0", 0},
		{"00", 0},
		{"007", 0},
		{"-1", 0},
		{"+1", 0},
		{" 1", 0},
		{"1 ", 0},
		{"1e3", 0},
		{"0x10", 0},
		{"18446744073709551616", 0},  // 2^64
		{"100000000000000000000", 0}, // 21 digits
		{"１", 0},                     // fullwidth digit
	}
	for _, tt := range tests {
		got, err := fence.ParseToken(tt.in)
		if tt.want == 0 {
			if !errors.Is(err, fence.ErrInvalidToken) {
				t.Errorf("ParseToken(%q) = %d, %v; want ErrInvalidToken", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseToken(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"1", "2", "0", "01", "-1", "+5", "18446744073709551615",
		"18446744073709551616", "99999999999999999999", " 7", "7\n", "１", "1_000", "0x1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := fence.ParseToken(s)
		ref, refErr := strconv.ParseUint(s, 10, 64)
		canonical := refErr == nil && ref > 0 && strconv.FormatUint(ref, 10) == s
		if canonical {
			if err != nil || got != ref {
				t.Fatalf("ParseToken(%q) = %d, %v; want %d", s, got, err, ref)
			}
			return
		}
		if err == nil {
			t.Fatalf("ParseToken(%q) = %d, accepted a non-canonical token", s, got)
		}
		if !errors.Is(err, fence.ErrInvalidToken) || got != 0 {
			t.Fatalf("ParseToken(%q) = %d, %v; want 0, ErrInvalidToken", s, got, err)
		}
		if !strings.HasPrefix(err.Error(), "fence: ") {
			t.Fatalf("error %q lacks the package prefix", err)
		}
	})
}

func TestValidateKey(t *testing.T) {
	tests := []struct {
		key string
		ok  bool
	}{
		{"report:417:rebuild", true},
		{"ключ", true},
		{strings.Repeat("k", fence.MaxKeyLen), true},
		{strings.Repeat("k", fence.MaxKeyLen+1), false},
		{"", false},
		{"a\x00b", false},
		{"\xff", false},
	}
	for _, tt := range tests {
		err := fence.ValidateKey(tt.key)
		if tt.ok != (err == nil) || (!tt.ok && !errors.Is(err, fence.ErrInvalidKey)) {
			t.Errorf("ValidateKey(%.20q) = %v, want ok=%v", tt.key, err, tt.ok)
		}
	}
}

func TestModeAdmits(t *testing.T) {
	tests := []struct {
		mode        fence.Mode
		token, last uint64
		want        bool
	}{
		{fence.Monotonic, 1, 0, true},
		{fence.Monotonic, 2, 2, true},
		{fence.Monotonic, 1, 2, false},
		{fence.Monotonic, math.MaxUint64, math.MaxUint64 - 1, true},
		{fence.Strict, 1, 0, true},
		{fence.Strict, 2, 2, false},
		{fence.Strict, 3, 2, true},
		{fence.Strict, 1, 2, false},
	}
	for _, tt := range tests {
		if got := tt.mode.Admits(tt.token, tt.last); got != tt.want {
			t.Errorf("%v.Admits(%d, %d) = %v, want %v", tt.mode, tt.token, tt.last, got, tt.want)
		}
	}
}

func TestStaleTokenError(t *testing.T) {
	var err error = &fence.StaleTokenError{Key: "k", Token: 1, LastToken: 2}
	wrapped := errors.Join(errors.New("ctx"), err)
	if !errors.Is(wrapped, fence.ErrStaleToken) {
		t.Fatal("StaleTokenError does not match ErrStaleToken")
	}
	if errors.Is(err, fence.ErrInvalidToken) {
		t.Fatal("StaleTokenError matches ErrInvalidToken")
	}
	var ste *fence.StaleTokenError
	if !errors.As(wrapped, &ste) || ste.LastToken != 2 {
		t.Fatalf("errors.As = %v", ste)
	}
	if got := err.Error(); got != `fence: stale token 1 for key "k": last accepted token is 2` {
		t.Fatalf("Error() = %q", got)
	}
}
