// kcppeer: kcp-go test peer for chanq's KCP interop tests (tests/interop/kcp).
//
// One program, five modes (the first argument):
//
//	bridge -listen 127.0.0.1:PORT -kcp HOST:PORT [-fast]
//	    A TCP listener. Each accepted TCP connection dials kcp.DialWithOptions(addr, nil, 0, 0),
//	    exactly as channeld's clients do, and pumps bytes both ways; when either side ends, both
//	    are closed. Lets a TCP-speaking test client reach a KCP server over a real kcp-go stack.
//	proxy -listen 127.0.0.1:PORT -to HOST:PORT [-loss 0.1] [-seed N] [-reorder] [-dup] [-trace]
//	    A UDP proxy that drops the given fraction of datagrams in both directions, with one
//	    upstream socket per client address. -reorder delays some datagrams by 5..40 ms, -dup
//	    sends some twice, -trace prints every segment header (transports.md section 1).
//	echo -listen 127.0.0.1:PORT [-fast]
//	    A kcp-go echo server that listens exactly like channeld (kcp.Listen: no crypto, no FEC).
//	client -kcp HOST:PORT [-n N] [-sizes 1,100,...] [-fast] [-gap 50ms] [-timeout 120s]
//	    Dials like channeld's clients, writes N messages cycling through the sizes (a 40960-byte
//	    one included by default) as one byte stream whose byte i is i mod 251, reads the echo
//	    and checks it byte by byte. Prints "ok bytes=B ms=T" and exits 0, or exits 1.
//
// -fast means SetNoDelay(1, 10, 2, 1) + SetWindowSize(128, 128) + SetACKNoDelay(true); without
// it every kcp-go default applies, as in channeld. The listening modes print "ready <port>" on
// stdout once listening (PORT may be 0). Build in GOPATH mode with Debian's kcp-go (build.sh).
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	kcp "github.com/xtaci/kcp-go"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kcppeer bridge|proxy|echo|client [flags]  (-h after the mode for flags)")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	mode, args := os.Args[1], os.Args[2:]
	var err error
	switch mode {
	case "bridge":
		err = runBridge(args)
	case "proxy":
		err = runProxy(args)
	case "echo":
		err = runEcho(args)
	case "client":
		err = runClient(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kcppeer %s: %v\n", mode, err)
		os.Exit(1)
	}
}

func tune(s *kcp.UDPSession, fast bool) {
	if fast {
		s.SetNoDelay(1, 10, 2, 1)
		s.SetWindowSize(128, 128)
		s.SetACKNoDelay(true)
	}
}

func ready(addr net.Addr) {
	_, port, _ := net.SplitHostPort(addr.String())
	fmt.Printf("ready %s\n", port)
	os.Stdout.Sync()
}

// ---- bridge -------------------------------------------------------------------------------

func runBridge(args []string) error {
	fs := flag.NewFlagSet("bridge", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "TCP address to listen on")
	target := fs.String("kcp", "", "KCP server address (HOST:PORT)")
	fast := fs.Bool("fast", false, "fast profile on the kcp-go side")
	fs.Parse(args)
	if *target == "" {
		return fmt.Errorf("-kcp is required")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	ready(ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go bridgeOne(c, *target, *fast)
	}
}

func bridgeOne(c net.Conn, target string, fast bool) {
	s, err := kcp.DialWithOptions(target, nil, 0, 0) // channeld's client setup
	if err != nil {
		fmt.Fprintf(os.Stderr, "bridge: dial %s: %v\n", target, err)
		c.Close()
		return
	}
	tune(s, fast)
	var once sync.Once
	done := make(chan struct{})
	closeBoth := func() {
		once.Do(func() {
			c.Close()
			s.Close()
			close(done)
		})
	}
	go func() { io.Copy(s, c); closeBoth() }()
	go func() { io.Copy(c, s); closeBoth() }()
	<-done
}

// ---- proxy --------------------------------------------------------------------------------

type proxy struct {
	ln       *net.UDPConn
	to       *net.UDPAddr
	loss     float64
	reorder  bool
	dup      bool
	trace    bool
	mu       sync.Mutex
	rng      *rand.Rand
	peers    map[string]*net.UDPConn
	fwd      uint64
	dropped  uint64
	delayed  uint64
	doubled  uint64
	dirNames [2]string
}

func (p *proxy) roll() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.Float64()
}

func (p *proxy) traceSegs(dir int, d []byte, dropped bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s len=%d", time.Now().Format("15:04:05.000"), p.dirNames[dir], len(d))
	if dropped {
		b.WriteString(" DROPPED")
	}
	for len(d) >= 24 {
		conv := binary.LittleEndian.Uint32(d)
		n := binary.LittleEndian.Uint32(d[20:])
		fmt.Fprintf(&b, "\n  conv=%08x cmd=%d frg=%d wnd=%d ts=%d sn=%d una=%d len=%d", conv, d[4],
			d[5], binary.LittleEndian.Uint16(d[6:]), binary.LittleEndian.Uint32(d[8:]),
			binary.LittleEndian.Uint32(d[12:]), binary.LittleEndian.Uint32(d[16:]), n)
		if uint64(n) > uint64(len(d)-24) {
			b.WriteString(" (truncated)")
			break
		}
		d = d[24+n:]
	}
	fmt.Fprintln(os.Stderr, b.String())
}

// send applies loss, duplication and delay to one datagram going in direction dir.
func (p *proxy) send(dir int, d []byte, write func([]byte)) {
	if p.roll() < p.loss {
		atomic.AddUint64(&p.dropped, 1)
		if p.trace {
			p.traceSegs(dir, d, true)
		}
		return
	}
	if p.trace {
		p.traceSegs(dir, d, false)
	}
	atomic.AddUint64(&p.fwd, 1)
	copies := 1
	if p.dup && p.roll() < 0.05 {
		copies = 2
		atomic.AddUint64(&p.doubled, 1)
	}
	for i := 0; i < copies; i++ {
		if p.reorder && p.roll() < 0.1 {
			atomic.AddUint64(&p.delayed, 1)
			delay := time.Duration(5+p.roll()*35) * time.Millisecond
			b := append([]byte(nil), d...)
			time.AfterFunc(delay, func() { write(b) })
		} else {
			write(d)
		}
	}
}

func (p *proxy) upstream(client *net.UDPAddr) (*net.UDPConn, error) {
	key := client.String()
	p.mu.Lock()
	defer p.mu.Unlock()
	if up, ok := p.peers[key]; ok {
		return up, nil
	}
	up, err := net.DialUDP("udp", nil, p.to)
	if err != nil {
		return nil, err
	}
	p.peers[key] = up
	go func() { // server -> client
		buf := make([]byte, 65536)
		for {
			n, err := up.Read(buf)
			if err != nil {
				return
			}
			d := append([]byte(nil), buf[:n]...)
			p.send(1, d, func(b []byte) { p.ln.WriteToUDP(b, client) })
		}
	}()
	return up, nil
}

func runProxy(args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "UDP address to listen on")
	to := fs.String("to", "", "UDP server address (HOST:PORT)")
	loss := fs.Float64("loss", 0, "fraction of datagrams dropped, each direction")
	seed := fs.Int64("seed", 1, "random seed")
	reorder := fs.Bool("reorder", false, "delay 10% of datagrams by 5..40 ms")
	dup := fs.Bool("dup", false, "send 5% of datagrams twice")
	trace := fs.Bool("trace", false, "print every segment header on stderr")
	fs.Parse(args)
	if *to == "" {
		return fmt.Errorf("-to is required")
	}
	toAddr, err := net.ResolveUDPAddr("udp", *to)
	if err != nil {
		return err
	}
	laddr, err := net.ResolveUDPAddr("udp", *listen)
	if err != nil {
		return err
	}
	ln, err := net.ListenUDP("udp", laddr)
	if err != nil {
		return err
	}
	p := &proxy{ln: ln, to: toAddr, loss: *loss, reorder: *reorder, dup: *dup, trace: *trace,
		rng: rand.New(rand.NewSource(*seed)), peers: map[string]*net.UDPConn{},
		dirNames: [2]string{"c->s", "s->c"}}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		fmt.Fprintf(os.Stderr, "proxy: forwarded %d dropped %d delayed %d doubled %d\n",
			atomic.LoadUint64(&p.fwd), atomic.LoadUint64(&p.dropped),
			atomic.LoadUint64(&p.delayed), atomic.LoadUint64(&p.doubled))
		os.Exit(0)
	}()
	ready(ln.LocalAddr())
	buf := make([]byte, 65536)
	for {
		n, client, err := ln.ReadFromUDP(buf)
		if err != nil {
			return err
		}
		up, err := p.upstream(client)
		if err != nil {
			return err
		}
		d := append([]byte(nil), buf[:n]...)
		p.send(0, d, func(b []byte) { up.Write(b) })
	}
}

// ---- echo ---------------------------------------------------------------------------------

func runEcho(args []string) error {
	fs := flag.NewFlagSet("echo", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "UDP address to listen on")
	fast := fs.Bool("fast", false, "fast profile on accepted sessions")
	fs.Parse(args)
	// kcp.Listen(addr) == kcp.ListenWithOptions(addr, nil, 0, 0), the call channeld makes;
	// the concrete type is needed for the bound address and AcceptKCP.
	ln, err := kcp.ListenWithOptions(*listen, nil, 0, 0)
	if err != nil {
		return err
	}
	ready(ln.Addr())
	for {
		s, err := ln.AcceptKCP()
		if err != nil {
			return err
		}
		tune(s, *fast)
		go func() {
			defer s.Close()
			io.Copy(s, s)
		}()
	}
}

// ---- client -------------------------------------------------------------------------------

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad size %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func runClient(args []string) error {
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	target := fs.String("kcp", "", "KCP echo server address (HOST:PORT)")
	n := fs.Int("n", 60, "messages to send")
	sizesArg := fs.String("sizes", "1,5,100,1376,1377,3000,40960,700,20000", "message sizes, cycled")
	fast := fs.Bool("fast", false, "fast profile")
	timeout := fs.Duration("timeout", 120*time.Second, "give up after this long")
	gap := fs.Duration("gap", 0, "pause between messages (game-like traffic)")
	fs.Parse(args)
	if *target == "" {
		return fmt.Errorf("-kcp is required")
	}
	sizes, err := parseSizes(*sizesArg)
	if err != nil {
		return err
	}
	total := 0
	for i := 0; i < *n; i++ {
		total += sizes[i%len(sizes)]
	}
	s, err := kcp.DialWithOptions(*target, nil, 0, 0) // channeld's client setup
	if err != nil {
		return err
	}
	defer s.Close()
	tune(s, *fast)
	start := time.Now()
	s.SetDeadline(start.Add(*timeout))

	werr := make(chan error, 1)
	go func() {
		off := 0
		for i := 0; i < *n; i++ {
			msg := make([]byte, sizes[i%len(sizes)])
			for j := range msg {
				msg[j] = byte((off + j) % 251)
			}
			if _, err := s.Write(msg); err != nil {
				werr <- fmt.Errorf("write message %d: %v", i, err)
				return
			}
			off += len(msg)
			if *gap > 0 {
				time.Sleep(*gap)
			}
		}
		werr <- nil
	}()

	buf := make([]byte, 65536)
	got := 0
	for got < total {
		m, err := s.Read(buf)
		if err != nil {
			return fmt.Errorf("read after %d of %d bytes (%v): %v", got, total, time.Since(start), err)
		}
		for j := 0; j < m; j++ {
			if want := byte((got + j) % 251); buf[j] != want {
				return fmt.Errorf("byte %d: got %d want %d", got+j, buf[j], want)
			}
		}
		got += m
	}
	elapsed := time.Since(start)
	if err := <-werr; err != nil {
		return err
	}
	// Nothing extra may follow: wait briefly for stray bytes.
	s.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if m, err := s.Read(buf); m > 0 {
		return fmt.Errorf("%d unexpected bytes after the echo", m)
	} else if err == nil {
		return fmt.Errorf("read returned no bytes and no error")
	}
	fmt.Printf("ok bytes=%d messages=%d ms=%d conv=%08x\n", total, *n, elapsed.Milliseconds(), s.GetConv())
	return nil
}
