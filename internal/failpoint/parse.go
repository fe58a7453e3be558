package failpoint

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse reads a spec POINT:N[:ROLE] (see the package comment).
func Parse(spec string) (p Point, at int64, role string, err error) {
	parts := strings.Split(spec, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, 0, "", fmt.Errorf("want POINT:N[:leader|:follower]")
	}
	found := false
	for _, q := range Points() {
		if q.String() == parts[0] {
			p, found = q, true
		}
	}
	if !found {
		return 0, 0, "", fmt.Errorf("unknown point %q (want one of %s)", parts[0], strings.Join(pointNames(), ", "))
	}
	at, err = strconv.ParseInt(parts[1], 10, 64)
	if err != nil || at < 1 {
		return 0, 0, "", fmt.Errorf("hit %q: want an integer ≥ 1", parts[1])
	}
	if len(parts) == 3 {
		role = parts[2]
		if role != "leader" && role != "follower" {
			return 0, 0, "", fmt.Errorf("role %q: want leader or follower", role)
		}
	}
	return p, at, role, nil
}

func pointNames() []string {
	var out []string
	for _, p := range Points() {
		out = append(out, p.String())
	}
	return out
}
