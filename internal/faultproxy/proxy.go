// Package faultproxy is a loopback TCP proxy for fault-injection tests. It sits
// between a client and a Redis server and can add latency, stall traffic
// (connections stay open, nothing moves), cut connections, refuse new ones,
// drop pub/sub messages ("message", "smessage" and "pmessage" pushes)
// travelling from the server to the client, and lose replies: forward a
// command to the server and cut the connection before its reply is relayed
// back (see LoseReply), so that the command runs but its caller never learns
// the outcome.
//
// It listens on 127.0.0.1 only, on a port the kernel picks.
package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
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

	losses []*loss // armed by LoseReply, taken in order; guarded by mu
	lost   atomic.Int64

	wg sync.WaitGroup
}

// link is one proxied connection: the client side and the server side.
type link struct {
	client, server net.Conn
	once           sync.Once

	mu         sync.Mutex
	sent       int64 // commands forwarded to the server
	replies    int64 // replies (not pushes) read from the server
	subscriber bool  // the client subscribed on this connection
	loseAt     int64 // index of the command whose reply is lost; -1: none
	loss       *loss
}

// loss is one armed LoseReply.
type loss struct {
	match func(args []string) bool
	done  chan struct{}
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

// LoseReply arms the loss of one reply: the next command, on any connection
// that did not subscribe to pub/sub channels, for which match returns true (nil
// matches every command) is forwarded to the server, and every byte the
// server sends back on that connection from then on is dropped; once the
// server has replied to that command (so it has run) the connection is cut.
// Replies to commands pipelined before or after it on that connection are
// lost with it. Several losses may be armed at once; each is taken by one
// command. The returned channel is closed when the loss happened (the reply
// was dropped and the connection cut).
//
// match receives the command's arguments (the name first, as sent); it must
// not keep them.
func (p *Proxy) LoseReply(match func(args []string) bool) <-chan struct{} {
	l := &loss{match: match, done: make(chan struct{})}
	p.mu.Lock()
	p.losses = append(p.losses, l)
	p.mu.Unlock()
	return l.done
}

// CancelLosses disarms every LoseReply not taken by a command yet; it returns
// how many there were. Losses under way (command forwarded, reply awaited)
// still happen.
func (p *Proxy) CancelLosses() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.losses)
	p.losses = nil
	return n
}

// LostReplies is how many armed losses happened so far.
func (p *Proxy) LostReplies() int64 { return p.lost.Load() }

// takeLoss returns the first armed loss matching the command, removing it.
func (p *Proxy) takeLoss(args []string) *loss {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, l := range p.losses {
		if l.match == nil || l.match(args) {
			p.losses = append(p.losses[:i:i], p.losses[i+1:]...)
			return l
		}
	}
	return nil
}

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
	l := &link{client: client, server: server, loseAt: -1}
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
		p.pipeCommands(l)
	})
	wg.Go(func() {
		defer l.close()
		p.pipeFrames(l)
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

// pipeCommands copies client-to-server traffic one command at a time, so
// that a command can be picked for a lost reply. Commands already buffered
// are forwarded together.
func (p *Proxy) pipeCommands(l *link) {
	r := bufio.NewReaderSize(l.client, 32<<10)
	var out []byte
	var n int64 // commands in out
	flush := func() bool {
		if len(out) == 0 {
			return true
		}
		if !p.gate() {
			return false
		}
		l.mu.Lock()
		l.sent += n
		l.mu.Unlock()
		_, err := l.server.Write(out)
		out, n = out[:0], 0
		return err == nil
	}
	for {
		raw, args, err := readCommand(r)
		if err != nil {
			flush()
			return
		}
		if len(args) > 0 {
			switch name := strings.ToUpper(args[0]); name {
			case "SUBSCRIBE", "SSUBSCRIBE", "PSUBSCRIBE":
				l.mu.Lock()
				l.subscriber = true
				l.mu.Unlock()
			default:
				l.mu.Lock()
				armable := !l.subscriber && l.loseAt < 0
				l.mu.Unlock()
				if armable {
					if lo := p.takeLoss(args); lo != nil {
						// Everything before it goes first, then it alone, so that
						// its index is known before its reply can come back.
						if !flush() {
							return
						}
						l.mu.Lock()
						l.loseAt, l.loss = l.sent, lo
						l.mu.Unlock()
						out, n = append(out, raw...), 1
						if !flush() {
							return
						}
						continue
					}
				}
			}
		}
		out = append(out, raw...)
		n++
		if r.Buffered() > 0 && len(out) < 64<<10 {
			continue
		}
		if !flush() {
			return
		}
	}
}

// pipeFrames copies server-to-client traffic one RESP value at a time, so
// that pub/sub messages can be dropped whole and replies counted. Values
// already buffered are forwarded together.
func (p *Proxy) pipeFrames(l *link) {
	r := bufio.NewReaderSize(l.server, 32<<10)
	var out []byte
	for {
		frame, err := readFrame(r)
		if err != nil {
			if len(out) > 0 && p.gate() {
				_, _ = l.client.Write(out)
			}
			return
		}
		l.mu.Lock()
		if !frame.isPush {
			l.replies++
		}
		losing, lo := l.loseAt >= 0, l.loss
		hit := losing && l.replies > l.loseAt
		l.mu.Unlock()
		if hit {
			// The command ran and its reply is here: drop it and cut.
			p.lost.Add(1)
			p.cuts.Add(1)
			l.close()
			close(lo.done)
			return
		}
		switch {
		case losing:
			// Replies after the lost command's are dropped with it.
		case p.drop.Load() && frame.isMessage:
			p.dropped.Add(1)
		default:
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
		if _, err := l.client.Write(out); err != nil {
			return
		}
		out = out[:0]
	}
}

// readCommand reads one command sent by a client: a RESP array of bulk
// strings, or an inline command. It returns the raw bytes and the arguments.
func readCommand(r *bufio.Reader) ([]byte, []string, error) {
	b, err := r.Peek(1)
	if err != nil {
		return nil, nil, err
	}
	if b[0] != '*' {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return line, nil, err
		}
		return line, strings.Fields(string(line)), nil
	}
	var raw []byte
	var args []string
	line, err := r.ReadBytes('\n')
	raw = append(raw, line...)
	if err != nil {
		return raw, nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return raw, nil, errProtocol
	}
	n, err := atoi(line[1 : len(line)-2])
	if err != nil || n > maxAggregate {
		return raw, nil, errProtocol
	}
	for i := 0; i < n; i++ {
		s, err := readValue(r, &raw, false)
		if err != nil {
			return raw, nil, err
		}
		args = append(args, s)
	}
	return raw, args, nil
}

var errProtocol = errors.New("faultproxy: RESP protocol error")

type frame struct {
	raw       []byte
	isMessage bool
	isPush    bool // a RESP3 push (out of band, not a reply)
}

// readFrame reads one complete RESP2/RESP3 value.
func readFrame(r *bufio.Reader) (frame, error) {
	var f frame
	first, err := readValue(r, &f.raw, true)
	if err != nil {
		return f, err
	}
	f.isMessage = first == "message" || first == "smessage" || first == "pmessage"
	f.isPush = len(f.raw) > 0 && f.raw[0] == '>'
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
