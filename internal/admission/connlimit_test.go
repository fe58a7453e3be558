package admission

import (
	"net"
	"testing"
)

// TestAddrKey: connections count per IPv4 address and per IPv6 /64, an
// IPv4-mapped address as its IPv4 address.
func TestAddrKey(t *testing.T) {
	key := func(s string) string {
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			t.Fatal(err)
		}
		return addrString(addrKey(a))
	}
	for addr, want := range map[string]string{
		"192.0.2.7:443":             "192.0.2.7",
		"[::ffff:192.0.2.7]:443":    "192.0.2.7",
		"[2001:db8::1]:443":         "2001:db8::/64",
		"[2001:db8::ffff:ffff:1]:1": "2001:db8::/64",
		"[2001:db8:0:1::1]:443":     "2001:db8:0:1::/64",
		"[fe80::1%lo]:443":          "fe80::/64",
	} {
		if got := key(addr); got != want {
			t.Errorf("%s counts under %s, want %s", addr, got, want)
		}
	}
	if got := addrString(addrKey(&net.UnixAddr{Name: "/tmp/s", Net: "unix"})); got != "a non-IP address" {
		t.Errorf("a Unix socket counts under %s", got)
	}
}
