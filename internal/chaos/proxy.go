package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// DialTimeoutDefault bounds the proxy's dial of its target.
const DialTimeoutDefault = 5 * time.Second

// Proxy forwards TCP connections from a loopback address to a target and can
// cut them all, as if the target went down. Its methods are safe for
// concurrent use. Close it when done (t.Cleanup).
type Proxy struct {
	target string
	ln     net.Listener
	// ctx ends at Close; it bounds the dials of the target.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex // guards the fields below
	cut    bool
	closed bool
	conns  map[net.Conn]struct{} // both ends of every live link
	wg     sync.WaitGroup        // the accept loop and every copy goroutine
}

// New starts a proxy to target (host:port) listening on 127.0.0.1:0.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{target: target, ln: ln, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address (127.0.0.1:port): give it to the client in
// place of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut resets every live connection and makes the proxy reset new ones until
// Restore: the target looks down.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		reset(c)
		delete(p.conns, c)
	}
}

// Restore lets new connections through to the target again. Connections
// reset by Cut stay dead: clients reconnect.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops listening, resets every connection and waits for the proxy's
// goroutines to end. Close is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for c := range p.conns {
		reset(c)
		delete(p.conns, c)
	}
	p.mu.Unlock()
	p.cancel()
	err := p.ln.Close()
	p.wg.Wait()
	if err != nil {
		return fmt.Errorf("chaos: close: %w", err)
	}
	return nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient accept error (EMFILE): keep serving
		}
		p.mu.Lock()
		down := p.cut || p.closed
		if !down {
			p.wg.Add(1)
		}
		p.mu.Unlock()
		if down {
			reset(c)
			continue
		}
		// Dial in its own goroutine so a slow target does not hold up
		// other clients (or Cut and Close).
		go p.link(c)
	}
}

// link dials the target for client c and copies both ways until either side
// ends, then closes both.
func (p *Proxy) link(c net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: DialTimeoutDefault}
	s, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		reset(c)
		return
	}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		reset(c)
		reset(s)
		return
	}
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		pipe(s, c)
		p.drop(c, s)
	}()
	pipe(c, s)
	p.drop(c, s)
}

// pipe copies from src to dst until src ends or either side fails.
func pipe(dst, src net.Conn) { _, _ = io.Copy(dst, src) }

// drop closes both ends of a link (the second call finds them gone).
func (p *Proxy) drop(c, s net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
	_ = c.Close()
	_ = s.Close()
}

// reset closes c with a TCP RST (linger 0), as a crashed peer would, so the
// other side fails at once instead of reading a clean end of stream.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
