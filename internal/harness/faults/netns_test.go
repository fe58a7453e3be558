//go:build leasehold_faults

package faults

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"unsafe"
)

// sysSetns is setns(2) on linux/amd64 and linux/arm64.
var sysSetns = map[string]uintptr{"amd64": 308, "arm64": 268}[runtime.GOARCH]

// loopbackUp brings lo up in the calling process's network namespace (a
// new namespace has it down, without 127.0.0.1).
func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var ifr [40]byte // struct ifreq: name[16], flags
	copy(ifr[:], "lo")
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
		return e
	}
	*(*uint16)(unsafe.Pointer(&ifr[16])) |= syscall.IFF_UP
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
		return e
	}
	return nil
}

// inNetns runs f on an OS thread that has entered the network namespace
// ns (nil: the test's own), then returns the thread to the test's
// namespace. Sockets keep the namespace they were created in. A thread
// that cannot go back stays locked and exits with its goroutine. (Threads
// must not exit otherwise: a process started from one would get its
// Pdeathsig.)
func inNetns(ns *os.File, f func() error) error {
	if ns == nil {
		return f()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", syscall.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer home.Close()
		if _, _, e := syscall.RawSyscall(sysSetns, ns.Fd(), syscall.CLONE_NEWNET, 0); e != 0 {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("setns: %w", e)
			return
		}
		err = f()
		if _, _, e := syscall.RawSyscall(sysSetns, home.Fd(), syscall.CLONE_NEWNET, 0); e == 0 {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// linkState is what a link between two namespaces does with traffic.
type linkState int

const (
	linkUp      linkState = iota
	linkStalled           // connections open, no byte passes (a partition that drops packets)
)

// link forwards TCP connections accepted on one port in the namespace of
// its source to the same port in the namespace of its destination node
// (newLink), or from a free port of the test's namespace to an address
// (newProxy). Its methods are safe for concurrent use.
type link struct {
	from, to string // node ids ("host" for the test's own namespace)
	ln       net.Listener
	dial     func() (net.Conn, error) // connects to the destination; errDown while it is down

	mu     sync.Mutex // protects following
	state  linkState
	flow   chan struct{} // closed while traffic flows
	conns  map[net.Conn]struct{}
	closed bool

	wg sync.WaitGroup // the accept loop and the copiers
}

// errDown is what a link's dial returns while its destination is down.
var errDown = errors.New("the destination is down")

// newLink links port in namespace ns (nil: the test's own) to the same
// port in the namespace dst returns (a duplicate, closed after use; nil
// while the destination is down).
func newLink(from, to string, ns *os.File, port int, dst func() *os.File) (*link, error) {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	dial := func() (net.Conn, error) {
		ns := dst()
		if ns == nil {
			return nil, errDown
		}
		defer ns.Close()
		var out net.Conn
		err := inNetns(ns, func() error {
			var err error
			out, err = net.Dial("tcp", addr)
			return err
		})
		return out, err
	}
	var ln net.Listener
	err := inNetns(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("link %s→%s port %d: %w", from, to, port, err)
	}
	return startLink(from, to, ln, dial), nil
}

// newProxy forwards connections from a free 127.0.0.1 port of the test's
// namespace (the returned link's ln.Addr) to addr, through the test's
// links: closing it cuts the clients that dialled it, and only them, from
// the node behind addr.
func newProxy(to, addr string) (*link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return startLink("host", to, ln, func() (net.Conn, error) { return net.Dial("tcp", addr) }), nil
}

func startLink(from, to string, ln net.Listener, dial func() (net.Conn, error)) *link {
	l := &link{from: from, to: to, ln: ln, dial: dial, flow: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(l.flow)
	l.wg.Go(l.accept)
	return l
}

func (l *link) accept() {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		out, err := l.dial()
		if err != nil {
			in.Close() // the destination is down or refused: as a refused connection
			continue
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			in.Close()
			out.Close()
			return
		}
		l.conns[in], l.conns[out] = struct{}{}, struct{}{}
		l.mu.Unlock()
		l.wg.Go(func() { l.copy(out, in) })
		l.wg.Go(func() { l.copy(in, out) })
	}
}

// copy moves bytes from src to dst, holding each chunk while the link is
// stalled.
func (l *link) copy(dst, src net.Conn) {
	defer func() {
		l.mu.Lock()
		delete(l.conns, src)
		l.mu.Unlock()
		src.Close()
		dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			l.mu.Lock()
			flow := l.flow
			l.mu.Unlock()
			<-flow
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // both directions end: a closed or broken connection
		}
	}
}

// set stalls the link or lets traffic flow again.
func (l *link) set(s linkState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.state == s {
		return
	}
	l.state = s
	if s == linkStalled {
		l.flow = make(chan struct{})
	} else {
		close(l.flow)
	}
}

// reset closes every connection the link carries (as when one end's
// machine dies: its peers' connections break).
func (l *link) reset() {
	l.mu.Lock()
	conns := l.conns
	l.conns = map[net.Conn]struct{}{}
	l.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

// close stops the link and waits for its goroutines.
func (l *link) close() {
	l.mu.Lock()
	l.closed = true
	if l.state == linkStalled {
		l.state = linkUp
		close(l.flow)
	}
	l.mu.Unlock()
	_ = l.ln.Close()
	l.reset()
	l.wg.Wait()
}
