package bench

// Real Lehr daemons (control, distributor) as processes of the lehr binary,
// so that a scenario measures each one's RSS and CPU on its own: control
// and its embedded etcd in one process, a distributor in another, the bench
// (producers, simulated agents' parent) in a third.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// buildLehr builds cmd/lehr into dir and returns the binary's path.
func buildLehr(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "lehr")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "lehr.dev/lehr/cmd/lehr").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build lehr: %w: %s", err, out)
	}
	return bin, nil
}

// daemon is one lehr process: its output appended to a log file, its
// /metrics (when it serves them) read over HTTP.
type daemon struct {
	name        string
	bin         string
	args        []string
	logPath     string
	metricsAddr string // host:port of /metrics; empty: none

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // Wait's, once done is closed
}

// startDaemon starts bin with args, its output appended to logPath.
func startDaemon(name, bin, logPath, metricsAddr string, args []string) (*daemon, error) {
	d := &daemon{name: name, bin: bin, args: args, logPath: logPath, metricsAddr: metricsAddr}
	return d, d.start()
}

func (d *daemon) start() error {
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "\n==== bench: start %s\n", d.name)
	cmd := exec.Command(d.bin, d.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Not a systemd unit: no NOTIFY_SOCKET the bench may have inherited.
	// The runtime prints a line per GC (liveHeap reads it).
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOTIFY_SOCKET=") && !strings.HasPrefix(kv, "GODEBUG=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// Every goroutine in a SIGQUIT's dump (a stalled run's, stallReport).
	cmd.Env = append(cmd.Env, "GODEBUG=gctrace=1", "GOTRACEBACK=all")
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", d.name, err)
	}
	d.cmd, d.done = cmd, make(chan struct{})
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	return nil
}

// restart starts the process again with the same arguments; it must have
// exited.
func (d *daemon) restart() error {
	select {
	case <-d.done:
	default:
		return fmt.Errorf("restart %s: still running", d.name)
	}
	return d.start()
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// proc samples the process's CPU time and memory.
func (d *daemon) proc() (procSample, error) { return readProc(d.pid()) }

// stop sends SIGTERM and waits for the process to exit, killing it after
// grace. It returns how long the process took to exit. Stopping a process
// that has exited returns at once.
func (d *daemon) stop(grace time.Duration) time.Duration {
	start := time.Now()
	select {
	case <-d.done:
		return 0
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(grace):
		d.cmd.Process.Kill()
		<-d.done
	}
	return time.Since(start)
}

// alive returns an error, with the end of the log, if the process exited.
func (d *daemon) alive() error {
	select {
	case <-d.done:
		return fmt.Errorf("%s exited (%v); log %s:\n%s", d.name, d.err, d.logPath, d.tail(2000))
	default:
		return nil
	}
}

// tail returns about the last n bytes of the log.
func (d *daemon) tail(n int64) string {
	f, err := os.Open(d.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		f.Seek(fi.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// liveHeap returns the Go heap live after the process's last GC, in MiB
// (GODEBUG=gctrace=1's figure, 1 MB resolution), and whether a GC line
// of the current process was found.
func (d *daemon) liveHeap() (float64, bool) {
	log := d.tail(256 << 10)
	if i := strings.LastIndex(log, "==== bench: start "); i >= 0 {
		log = log[i:]
	}
	m := gctraceRE.FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		return 0, false
	}
	live, _ := strconv.Atoi(m[len(m)-1][3])
	return float64(live), true
}

// metrics reads the process's /metrics: every sample by its series name
// (the metric name with its labels, as written).
func (d *daemon) metrics(ctx context.Context) (promSamples, error) {
	if d.metricsAddr == "" {
		return nil, fmt.Errorf("%s serves no metrics", d.name)
	}
	// Generous: a daemon serving thousands of agents on 2 shared cores
	// answered the catalog's scrape in more than 5 s.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.metricsAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s metrics: %w", d.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s metrics: %s", d.name, resp.Status)
	}
	return parseProm(resp.Body)
}

// waitMetrics polls d's metrics until cond holds, d exits, timeout
// passes or ctx ends; what names the condition in the error.
func waitMetrics(ctx context.Context, d *daemon, what string, timeout time.Duration, cond func(promSamples) bool) error {
	deadline := time.Now().Add(timeout)
	for {
		m, err := d.metrics(ctx)
		if err == nil && cond(m) {
			return nil
		}
		if err := d.alive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not %s within %v (%v)", d.name, what, timeout, err)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// promSamples are the samples of a Prometheus text exposition, by series.
type promSamples map[string]float64

// parseProm reads the Prometheus text format: comments skipped, one
// "series value" per line (a timestamp after the value is ignored).
func parseProm(r io.Reader) (promSamples, error) {
	out := promSamples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		// The series may hold spaces inside its label values: the value
		// follows the closing brace, or the name.
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			end = strings.IndexByte(line, ' ') - 1
		}
		if end < 0 || end+1 >= len(line) {
			continue
		}
		series := line[:end+1]
		f := strings.Fields(line[end+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		out[series] = v
	}
	return out, sc.Err()
}

// sum returns the sum of every series of the metric name.
func (s promSamples) sum(name string) float64 {
	var n float64
	for k, v := range s {
		if k == name || strings.HasPrefix(k, name+"{") {
			n += v
		}
	}
	return n
}

// freeTCPAddr returns a loopback TCP address that was free a moment ago.
func freeTCPAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// freeUDPAddr returns a loopback UDP address that was free a moment ago.
func freeUDPAddr() (string, error) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer pc.Close()
	return pc.LocalAddr().String(), nil
}

// heapOr0 is liveHeap's figure, 0 when no GC was seen.
func (d *daemon) heapOr0() float64 {
	h, _ := d.liveHeap()
	return h
}
