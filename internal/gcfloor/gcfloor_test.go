package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func readUint(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// waitFor runs collections until cond holds (the finalizer that adjusts
// GOGC runs on its own goroutine after a cycle), for at most 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 5 s (GOGC %d, heap goal %d, live %d)", what,
				readUint("/gc/gogc:percent"), readUint("/gc/heap/goal:bytes"), readUint("/gc/heap/live:bytes"))
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// The tests change the process's GOGC: none of them runs in parallel.

func TestFloorRaisesTheHeapGoal(t *testing.T) {
	const floor = 64 << 20
	runtime.GC()
	if goal := readUint("/gc/heap/goal:bytes"); goal > floor/2 {
		t.Fatalf("heap goal before Start is %d; the test needs a small heap", goal)
	}
	stop := Start(floor)
	// The goal lands near the floor: not below 90 % of it, and not above
	// it by more than what GOGC counts besides the live heap.
	waitFor(t, "heap goal near the floor", func() bool {
		goal := readUint("/gc/heap/goal:bytes")
		return goal >= floor*9/10 && goal <= floor*11/10
	})
	stop()
	runtime.GC()
	if p := readUint("/gc/gogc:percent"); p != 100 {
		t.Fatalf("GOGC after stop = %d, want 100", p)
	}
	if goal := readUint("/gc/heap/goal:bytes"); goal > floor/2 {
		t.Fatalf("heap goal after stop is %d, want the goal GOGC=100 gives", goal)
	}
}

func TestFloorLeavesALargeHeapToGOGC(t *testing.T) {
	const floor = 8 << 20
	stop := Start(floor)
	defer stop()
	waitFor(t, "GOGC raised while the heap is small", func() bool { return readUint("/gc/gogc:percent") > 100 })
	keep := make([][]byte, 0, 64)
	for range 64 { // 16 MiB live, twice the floor
		keep = append(keep, make([]byte, 256<<10))
	}
	waitFor(t, "GOGC back to 100 with a live heap above the floor", func() bool { return readUint("/gc/gogc:percent") == 100 })
	runtime.KeepAlive(keep)
}

func TestFloorCollectsLessOften(t *testing.T) {
	churn := func() uint64 {
		runtime.GC()
		before := readUint("/gc/cycles/total:gc-cycles")
		var sink []byte
		for range 20_000 { // 80 MiB allocated, none kept
			sink = make([]byte, 4<<10)
		}
		runtime.KeepAlive(sink)
		return readUint("/gc/cycles/total:gc-cycles") - before
	}
	without := churn()
	stop := Start(64 << 20)
	defer stop()
	waitFor(t, "GOGC raised", func() bool { return readUint("/gc/gogc:percent") > 100 })
	with := churn()
	// 80 MiB at a 4 MiB goal is about 20 cycles; at a 64 MiB goal, one or two.
	if with > 3 || without < 2*with {
		t.Fatalf("collections during 80 MiB of garbage: %d with a 64 MiB floor, %d without", with, without)
	}
}

func TestStartRespectsGOGCOff(t *testing.T) {
	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	stop := Start(64 << 20)
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	runtime.GC()
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Fatalf("GOGC with the collector off and a floor = %d, want -1 (off)", p)
	}
	stop()
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Fatalf("GOGC after stop = %d, want -1 (off)", p)
	}
}

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		floor, live, scan uint64
		base, want        int
	}{
		{64 * mib, 2 * mib, 0, 100, 1600},      // (64−2)·100/2 = 3100, capped where 4 MiB·p/100 reaches 64 MiB
		{64 * mib, 8 * mib, 0, 100, 700},       // 8 MiB + 8 MiB · 7 = 64 MiB
		{64 * mib, 8 * mib, 8 * mib, 100, 350}, // stacks and globals count as GOGC counts them
		{64 * mib, 40 * mib, 0, 100, 100},      // 60 % would be below the base
		{64 * mib, 100 * mib, 0, 100, 100},     // above the floor: GOGC alone
		{64 * mib, 100 * mib, 0, 300, 300},     // an operator's GOGC stays the base
		{64 * mib, 0, 0, 100, 1600},            // before the first collection
		{2 * mib, 0, 0, 100, 100},              // a floor below the runtime's minimum goal
		{64 << 30, 1 * mib, 0, 100, 1_638_400}, // the largest floor does not overflow
		{64 << 30, 64 << 30, 0, 100, 100},      // live at the floor
		{64 * mib, 64*mib + 1, 0, 100, 100},    // live just above it
	} {
		if got := Percent(c.floor, c.base, c.live, c.scan); got != c.want {
			t.Errorf("Percent(floor %d, base %d, live %d, scan %d) = %d, want %d", c.floor, c.base, c.live, c.scan, got, c.want)
		}
	}
}
