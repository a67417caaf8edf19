package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// TermCrashNext is the Proc.Arm term (gofail's syntax) that makes a point
// with crash code of its own (such as DistributorMidSnapshot) run it at
// the next pass.
const TermCrashNext = "return"

// TermCrash returns the Proc.Arm term that crashes at the next pass
// through point: a panic naming it, which the supervisor recognises.
func TermCrash(point string) string { return fmt.Sprintf("panic(%q)", point) }

// Proc is one daemon process under supervision, as systemd runs it with
// Type=notify and Restart=on-failure: Start waits for READY=1 on a
// notification socket of its own; a process that exits without being
// killed by Kill is restarted after RestartDelay, and its exit is recorded
// (a crash point that fired, or an unexpected exit — a bug).
type Proc struct {
	// Name names the process in logs and reports, e.g. "agent z0-h1".
	Name string

	bin, dir string
	args     []string
	failAddr string // GOFAIL_HTTP address
	log      *slog.Logger
	ctx      context.Context // ends supervision (restarts) when done

	wg sync.WaitGroup // supervision goroutines

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the current process has exited
	gen      int
	readyGen int  // the generation that said READY=1 last
	killing  bool // the current process is being killed by Kill
	closed   bool
	starts   int
	kills    int
	crashes  map[string]int // crash point → crashes
	failures []string       // unexpected exits
	startErr error          // a failed restart after a crash
}

// errRunning is Start's error when the process runs already.
var errRunning = errors.New("already running")

// errKilled is Start's error when Kill killed the process it started
// before it was ready.
var errKilled = errors.New("chaos: killed while starting")

// restartDelay is systemd's RestartSec for a crashed process.
const restartDelay = 100 * time.Millisecond

// readyTimeout bounds the wait for READY=1.
const readyTimeout = 90 * time.Second

// NewProc returns a Proc that runs bin with args, keeping its log and
// notification sockets in dir (keep it short: a unix socket's path is at
// most 107 bytes). It starts nothing (see Start); ctx ends supervision.
// The daemon must say READY=1 on $NOTIFY_SOCKET, as Lehr's and etcd's do.
func NewProc(ctx context.Context, name, bin, dir string, args []string, log *slog.Logger) (*Proc, error) {
	if log == nil {
		log = slog.Default()
	}
	return newProc(ctx, name, bin, dir, args, log)
}

func newProc(ctx context.Context, name, bin, dir string, args []string, log *slog.Logger) (*Proc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freeTCPPort()
	if err != nil {
		return nil, err
	}
	return &Proc{
		Name: name, bin: bin, dir: dir, args: args, ctx: ctx,
		failAddr: fmt.Sprintf("127.0.0.1:%d", port),
		log:      log.With("proc", name),
		crashes:  map[string]int{},
	}, nil
}

// LogPath is the file the process's stdout and stderr are appended to.
func (p *Proc) LogPath() string { return filepath.Join(p.dir, "log") }

// Start starts the process and waits until it is ready. The process must
// not be running.
func (p *Proc) Start(ctx context.Context) error {
	p.mu.Lock()
	if p.cmd != nil {
		p.mu.Unlock()
		return fmt.Errorf("chaos: %s: %w", p.Name, errRunning)
	}
	p.gen++
	gen := p.gen
	p.mu.Unlock()

	notify := filepath.Join(p.dir, fmt.Sprintf("n%d.sock", gen))
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("chaos: %s: notification socket: %w", p.Name, err)
	}
	// The socket lives as long as the process, as systemd's does (the
	// daemon also says STOPPING=1); its reader ends when supervise closes
	// it after the process exited.
	ready := make(chan error, 1)
	started := false
	defer func() {
		if !started {
			ln.Close()
			os.Remove(notify)
		}
	}()

	logf, err := os.OpenFile(p.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "\n==== chaos: start %d of %s\n", gen, p.Name)
	p.mu.Lock()
	bin := p.bin
	p.mu.Unlock()
	cmd := exec.Command(bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(cleanEnv(), "NOTIFY_SOCKET="+notify, "GOFAIL_HTTP="+p.failAddr)
	exited := make(chan struct{})
	// Started under the lock, so Close either sees the process or stops
	// Start from starting it.
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("chaos: " + p.Name + " is closed")
	}
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		return fmt.Errorf("chaos: start %s: %w", p.Name, err)
	}
	p.cmd, p.exited, p.killing = cmd, exited, false
	p.starts++
	p.mu.Unlock()
	started = true
	p.wg.Go(func() { readNotify(ln, ready) })
	p.wg.Go(func() {
		p.supervise(cmd, exited, func() {
			ln.Close()
			os.Remove(notify)
		})
	})

	t := time.NewTimer(readyTimeout)
	defer t.Stop()
	select {
	case err := <-ready:
		if err != nil {
			return fmt.Errorf("chaos: %s: %w", p.Name, err)
		}
		p.mu.Lock()
		if p.cmd == cmd {
			p.readyGen = gen
		}
		p.mu.Unlock()
		return nil
	case <-exited:
		p.mu.Lock()
		killed := p.killing
		p.mu.Unlock()
		if killed {
			return errKilled
		}
		return fmt.Errorf("chaos: %s exited before it was ready; log %s:\n%s", p.Name, p.LogPath(), p.Tail(2000))
	case <-t.C:
		return fmt.Errorf("chaos: %s not ready after %v; log %s:\n%s", p.Name, readyTimeout, p.LogPath(), p.Tail(2000))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readNotify reads sd_notify messages from ln until it is closed, and
// sends on ready (buffered) once: nil at READY=1, or the read error if
// the socket failed before.
func readNotify(ln *net.UnixConn, ready chan<- error) {
	buf := make([]byte, 4096)
	said := false
	for {
		n, err := ln.Read(buf)
		if err != nil {
			if !said {
				ready <- fmt.Errorf("read notification socket: %w", err)
			}
			return
		}
		for _, line := range strings.Split(string(buf[:n]), "\n") {
			if line == "READY=1" && !said {
				said = true
				ready <- nil
			}
		}
	}
}

// cleanEnv is the test's environment without what would confuse a daemon.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "NOTIFY_SOCKET=") || strings.HasPrefix(kv, "GOFAIL_") || strings.HasPrefix(kv, "LEHR_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// supervise waits for cmd to exit and, unless Kill killed it or the Proc
// is closed, records why and restarts it.
func (p *Proc) supervise(cmd *exec.Cmd, exited chan struct{}, closeNotify func()) {
	err := cmd.Wait()
	closeNotify()
	p.mu.Lock()
	killed, closed := p.killing, p.closed
	if p.cmd == cmd {
		p.cmd = nil
	}
	close(exited)
	if killed || closed {
		p.mu.Unlock()
		return
	}
	tail := p.Tail(16 << 10)
	point := firedPoint(tail)
	if point != "" {
		p.crashes[point]++
	} else {
		p.failures = append(p.failures, fmt.Sprintf("%s exited unexpectedly (%v); log %s ends:\n%s", p.Name, err, p.LogPath(), lastLines(tail, 30)))
	}
	p.mu.Unlock()
	p.log.Info("process crashed; restarting", "crash_point", point, "err", err)

	t := time.NewTimer(restartDelay)
	select {
	case <-p.ctx.Done():
		t.Stop()
		return
	case <-t.C:
	}
	if err := p.Start(p.ctx); err != nil && p.ctx.Err() == nil && !errors.Is(err, errKilled) {
		p.mu.Lock()
		if !p.closed {
			p.startErr = err
		}
		p.mu.Unlock()
	}
}

// firedPoint returns the crash point whose panic ends log, or "".
func firedPoint(log string) string {
	// gofail's panic action says "failpoint panic: NAME"; crash code of
	// a point's own says "failpoint NAME: ...".
	i := strings.LastIndex(log, "\npanic: failpoint ")
	if i < 0 {
		return ""
	}
	msg := strings.TrimPrefix(log[i:], "\npanic: failpoint ")
	msg = strings.TrimPrefix(msg, "panic: ")
	for _, name := range crashPoints {
		if strings.HasPrefix(msg, name) {
			return name
		}
	}
	return ""
}

// Kill kills the process with SIGKILL and waits until it is gone; it
// stays down until Start. It reports false, doing nothing, when no process
// runs (one that crashed is restarted by its supervisor).
func (p *Proc) Kill() bool {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil {
		p.mu.Unlock()
		return false
	}
	p.killing = true
	p.kills++
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	return true
}

// Stop ends the process as "systemctl stop" does: SIGTERM, then SIGKILL
// if it has not exited after grace; it stays down until Start, and its
// exit is not a crash. It reports whether a process was running, and
// errors when grace ran out (a daemon that does not stop on SIGTERM).
func (p *Proc) Stop(grace time.Duration) (bool, error) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil {
		p.mu.Unlock()
		return false, nil
	}
	p.killing = true
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
		return true, nil
	case <-t.C:
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		return true, fmt.Errorf("chaos: %s did not exit within %v of SIGTERM; killed", p.Name, grace)
	}
}

// SetBinary makes every later start of the process, Start's or its
// supervisor's, run bin: a package upgrade's new binary on the same
// command line and data.
func (p *Proc) SetBinary(bin string) {
	p.mu.Lock()
	p.bin = bin
	p.mu.Unlock()
}

// Binary returns the binary the process starts from.
func (p *Proc) Binary() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bin
}

// Ready reports whether the process runs and has said READY=1.
func (p *Proc) Ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && p.readyGen == p.gen
}

// Running reports whether the process is running (it may not be ready).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Exited returns a channel closed when the current process exits, or nil
// when none runs.
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	return p.exited
}

// Arm sets crash point name to term (TermCrash(name), or TermCrashNext
// for a point with crash code of its own) in the running process, through
// gofail's HTTP endpoint. The process forgets it when it restarts.
func (p *Proc) Arm(ctx context.Context, name, term string) error {
	return p.failpoint(ctx, http.MethodPut, name, term)
}

// Disarm clears crash point name in the running process. A process that
// restarted meanwhile has no point armed, which is not an error.
func (p *Proc) Disarm(ctx context.Context, name string) error {
	err := p.failpoint(ctx, http.MethodDelete, name, "")
	if err != nil && strings.Contains(err.Error(), "failpoint is disabled") {
		return nil
	}
	return err
}

func (p *Proc) failpoint(ctx context.Context, method, name, term string) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+p.failAddr+"/"+name, strings.NewReader(term))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("chaos: %s: failpoint %s: %w", p.Name, name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("chaos: %s: failpoint %s %s: %s: %s", p.Name, method, name, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// Crashes returns how often crash point name has crashed the process.
func (p *Proc) Crashes(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.crashes[name]
}

// Counts returns how often the process was started and killed.
func (p *Proc) Counts() (starts, kills int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts, p.kills
}

// Failures returns the unexpected exits and failed restarts so far.
func (p *Proc) Failures() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := append([]string(nil), p.failures...)
	if p.startErr != nil {
		out = append(out, fmt.Sprintf("%s: restart after a crash failed: %v", p.Name, p.startErr))
	}
	return out
}

// Tail returns up to the last n bytes of the process's log.
func (p *Proc) Tail(n int64) string {
	f, err := os.Open(p.LogPath())
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	b, _ := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	return string(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Close stops supervising and ends the process: SIGTERM, then SIGKILL
// after grace. It waits for the supervision goroutines.
func (p *Proc) Close(grace time.Duration) {
	p.mu.Lock()
	p.closed = true
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		select {
		case <-exited:
		case <-t.C:
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		}
		t.Stop()
	}
	p.wg.Wait()
}

// Ports are handed out below the kernel's ephemeral range: a port taken
// from that range ("127.0.0.1:0") is free when picked, but every outgoing
// connection of every process on the machine draws from the same range, so
// one may take it before the daemon binds it ("address already in use").
// Below the range only another listener can, and within this process
// ports are never handed out twice.
var ports struct {
	sync.Mutex
	given map[int]bool
	rng   *rand.Rand
}

// portRange is where ports are picked: the 12,000 ports below the
// ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), or 20000 to
// 31999 when it cannot be read.
func portRange() (lo, hi int) {
	lo, hi = 20000, 32000
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	eph, err := strconv.Atoi(f[0])
	if err != nil || eph < 13024 {
		return lo, hi
	}
	return eph - 12000, eph
}

// freePort returns a port below the ephemeral range that bind accepts now
// and was not handed out before.
func freePort(bind func(addr string) (io.Closer, error)) (int, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.given == nil {
		ports.given = map[int]bool{}
		ports.rng = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	}
	lo, hi := portRange()
	var last error
	for range 200 {
		p := lo + ports.rng.IntN(hi-lo)
		if ports.given[p] {
			continue
		}
		c, err := bind(fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			last = err
			continue
		}
		c.Close()
		ports.given[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("chaos: no free loopback port in [%d, %d) after 200 tries: %v", lo, hi, last)
}

// FreeTCPPort returns a loopback TCP port free at the time of the call,
// below the ephemeral range and never handed out before by this process.
func FreeTCPPort() (int, error) { return freeTCPPort() }

// freeTCPPort returns a loopback TCP port free at the time of the call.
func freeTCPPort() (int, error) {
	return freePort(func(addr string) (io.Closer, error) { return net.Listen("tcp", addr) })
}

// freeUDPPort returns a loopback UDP port free at the time of the call.
func freeUDPPort() (int, error) {
	return freePort(func(addr string) (io.Closer, error) { return net.ListenPacket("udp", addr) })
}
