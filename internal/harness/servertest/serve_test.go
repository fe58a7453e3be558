package servertest

import (
	"fmt"
	"net"
	"testing"
)

// TestFreePortsDistinct: 200 ports at once are distinct and free. Chosen one
// at a time by listening and closing, 200 ports repeat one about three
// times in four on Linux's default port range.
func TestFreePortsDistinct(t *testing.T) {
	ports := FreePorts(t, 200)
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d given twice in %v", p, ports)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d not free: %v", p, err)
		}
		ln.Close()
	}
}
