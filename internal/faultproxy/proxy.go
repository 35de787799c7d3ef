// Package faultproxy is a loopback TCP proxy for fault-injection tests. It sits
// between a client and a Redis server and can add latency, stall traffic
// (connections stay open, nothing moves), cut connections, refuse new ones,
// and drop pub/sub messages ("message", "smessage" and "pmessage" pushes)
// travelling from the server to the client.
//
// It listens on 127.0.0.1 only, on a port the kernel picks.
package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards every connection accepted on Addr to the target address.
// Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	conns   map[*link]struct{}
	latency time.Duration
	blocked bool
	stall   chan struct{} // non-nil while stalled; closed by Resume
	closed  bool

	drop    atomic.Bool
	dropped atomic.Int64
	cuts    atomic.Int64

	wg sync.WaitGroup
}

// link is one proxied connection: the client side and the server side.
type link struct {
	client, server net.Conn
	once           sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// Start listens on a free 127.0.0.1 port and forwards to target, which must
// be a loopback address.
func Start(target string) (*Proxy, error) {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("faultproxy: target %q is not a loopback address", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients should dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetLatency delays every chunk of data, in both directions, by d.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Stall stops forwarding in both directions until Resume; connections stay
// open, as with a network partition that drops packets.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stall == nil {
		p.stall = make(chan struct{})
	}
}

// Resume ends a Stall.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stall != nil {
		close(p.stall)
		p.stall = nil
	}
}

// Block makes the proxy refuse new connections (they are accepted and closed
// at once) while on is true. Existing connections are not touched; Cut them.
func (p *Proxy) Block(on bool) {
	p.mu.Lock()
	p.blocked = on
	p.mu.Unlock()
}

// Cut closes every open connection and returns how many there were.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	p.cuts.Add(int64(len(links)))
	return len(links)
}

// DropMessages makes the proxy drop pub/sub messages from the server while on
// is true. Subscription confirmations and command replies still pass.
func (p *Proxy) DropMessages(on bool) { p.drop.Store(on) }

// Dropped is how many pub/sub messages were dropped so far.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// Conns is how many connections are open now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops listening, closes every connection and waits for the proxy's
// goroutines to end. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.stall != nil {
		close(p.stall)
		p.stall = nil
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		refuse := p.blocked || p.closed
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	l := &link{client: client, server: server}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.conns[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, l)
		p.mu.Unlock()
		l.close()
	}()
	var wg sync.WaitGroup
	wg.Go(func() {
		defer l.close()
		p.pipeRaw(server, client)
	})
	wg.Go(func() {
		defer l.close()
		p.pipeFrames(client, server)
	})
	wg.Wait()
}

// gate blocks while the proxy is stalled and then waits out the latency. It
// returns false when the proxy is closed.
func (p *Proxy) gate() bool {
	for {
		p.mu.Lock()
		stall, lat, closed := p.stall, p.latency, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		if stall == nil {
			if lat > 0 {
				time.Sleep(lat) // injected latency
			}
			return true
		}
		<-stall
	}
}

// pipeRaw copies client-to-server bytes in chunks.
func (p *Proxy) pipeRaw(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pipeFrames copies server-to-client traffic one RESP value at a time, so
// that pub/sub messages can be dropped whole. Values already buffered are
// forwarded together.
func (p *Proxy) pipeFrames(dst, src net.Conn) {
	r := bufio.NewReaderSize(src, 32<<10)
	var out []byte
	for {
		frame, err := readFrame(r)
		if err != nil {
			if len(out) > 0 && p.gate() {
				_, _ = dst.Write(out)
			}
			return
		}
		if p.drop.Load() && frame.isMessage {
			p.dropped.Add(1)
		} else {
			out = append(out, frame.raw...)
		}
		if r.Buffered() > 0 && len(out) < 64<<10 {
			continue
		}
		if len(out) == 0 {
			continue
		}
		if !p.gate() {
			return
		}
		if _, err := dst.Write(out); err != nil {
			return
		}
		out = out[:0]
	}
}

var errProtocol = errors.New("faultproxy: RESP protocol error")

type frame struct {
	raw       []byte
	isMessage bool
}

// readFrame reads one complete RESP2/RESP3 value.
func readFrame(r *bufio.Reader) (frame, error) {
	var f frame
	first, err := readValue(r, &f.raw, true)
	if err != nil {
		return f, err
	}
	f.isMessage = first == "message" || first == "smessage" || first == "pmessage"
	return f, nil
}

// maxAggregate bounds the element count accepted in an aggregate header.
const maxAggregate = 1 << 24

// readValue appends one value to raw. For an array or push at the top level it
// returns the first element when that is a string ("message" for a pub/sub
// message).
func readValue(r *bufio.Reader, raw *[]byte, top bool) (string, error) {
	line, err := r.ReadBytes('\n')
	*raw = append(*raw, line...)
	if err != nil {
		return "", err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return "", errProtocol
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return string(body), nil
	case '$', '!', '=':
		n, err := atoi(body)
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "", nil
		}
		start := len(*raw)
		*raw = append(*raw, make([]byte, n+2)...)
		if _, err := io.ReadFull(r, (*raw)[start:]); err != nil {
			return "", err
		}
		return string((*raw)[start : start+n]), nil
	case '*', '~', '>', '%', '|':
		n, err := atoi(body)
		if err != nil {
			return "", err
		}
		if n > maxAggregate {
			return "", errProtocol
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		var first string
		for i := 0; i < n; i++ {
			s, err := readValue(r, raw, false)
			if err != nil {
				return "", err
			}
			if i == 0 {
				first = s
			}
		}
		if line[0] == '|' {
			// An attribute precedes the value it describes.
			return readValue(r, raw, top)
		}
		if top && (line[0] == '*' || line[0] == '>') {
			return first, nil
		}
		return "", nil
	}
	return "", errProtocol
}

func atoi(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, errProtocol
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' || n > 1<<40 {
			return 0, errProtocol
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		return -n, nil
	}
	return n, nil
}
