package netfault

import (
	"bufio"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo serves a line echo on 127.0.0.1 until the test ends.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := c.Write(append(sc.Bytes(), '\n')); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// TestStallResumeClose: traffic passes, stops while stalled (the connection
// stays open), passes again after Resume, and Close cuts the connection.
func TestStallResumeClose(t *testing.T) {
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(msg string, within time.Duration) (string, error) {
		if err := c.SetDeadline(time.Now().Add(within)); err != nil {
			return "", err
		}
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if got, err := roundTrip("a", 5*time.Second); err != nil || got != "a\n" {
		t.Fatalf("before the stall: %q, %v", got, err)
	}
	p.Stall()
	if got, err := roundTrip("b", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("while stalled: %q, %v; want no answer", got, err)
	}
	p.Resume()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, err := r.ReadString('\n'); err != nil || got != "b\n" {
		t.Fatalf("after Resume the held bytes: %q, %v", got, err)
	}
	p.Close()
	if got, err := roundTrip("c", 5*time.Second); err == nil {
		t.Fatalf("after Close: %q, want the connection cut", got)
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("a new connection after Close was accepted")
	}
}
