package upstream_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"lehr.dev/lehr/agent/upstream"
	"lehr.dev/lehr/internal/pki"
	"lehr.dev/lehr/internal/tlsconfig"
	"lehr.dev/lehr/internal/wire"
	"lehr.dev/lehr/testenv/faultnet"
	"lehr.dev/lehr/testenv/wait"
)

// Environment of the distributor child process of
// TestRestartedDistributorResetsStaleConnections.
const (
	envChild   = "LEHR_TEST_DISTRIBUTOR_CHILD" // the address to listen on
	envCert    = "LEHR_TEST_CERT"
	envKey     = "LEHR_TEST_KEY"
	envCA      = "LEHR_TEST_CA"
	envVersion = "LEHR_TEST_GOAL_VERSION"
)

// TestDistributorChild is not a test: run as a child process (envChild
// set), it serves a distributor fan-out with app/cfg at the version of
// envVersion until it is killed.
func TestDistributorChild(t *testing.T) {
	addr := os.Getenv(envChild)
	if addr == "" {
		t.Skip("the distributor child process of TestRestartedDistributorResetsStaleConnections")
	}
	tc, err := tlsconfig.Server(os.Getenv(envCert), os.Getenv(envKey), os.Getenv(envCA))
	if err != nil {
		t.Fatal(err)
	}
	d := startDistOn(t, tc, "child", addr)
	v, _ := strconv.ParseUint(os.Getenv(envVersion), 10, 64)
	d.setGoal(t, version("app/cfg", v, map[string]string{"a": fmt.Sprint(v)}))
	fmt.Println("serving")
	select {} // until killed
}

// startChild runs a distributor on addr in a child process, with the
// certificate files given, and returns it once it serves.
func startChild(t *testing.T, addr, cert, key, ca string, goal uint64) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDistributorChild$", "-test.v")
	cmd.Env = append(os.Environ(), envChild+"="+addr, envCert+"="+cert, envKey+"="+key, envCA+"="+ca, envVersion+"="+fmt.Sprint(goal))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "serving" {
				close(serving)
				break
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case <-serving:
	case <-time.After(wait.Timeout):
		t.Fatal("the distributor child did not serve")
	}
	return cmd
}

// A distributor killed (kill -9: no goodbye, no CONNECTION_CLOSE) and
// restarted on the same address with the same certificate resets the
// agents' stale connections at once — it derives its QUIC stateless-reset
// key from its certificate's key, so the new process's resets carry the
// tokens the old one handed out — instead of each agent waiting for its
// idle timeout before it fails over (issue 8, defect 10: every crash
// stalled delivery for 20-22 s).
func TestRestartedDistributorResetsStaleConnections(t *testing.T) {
	p := newPKI(t)
	cert, key, err := p.ca.IssueURIFiles(filepath.Join(p.dir, "leaf"), "distributor", pki.Server, nil,
		tlsconfig.Identity{Role: tlsconfig.RoleDistributor, Zone: zone, Name: "distributor"}.URI(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(p.dir, "ca", pki.CACertFile)
	addr := freeUDPAddr(t)
	first := startChild(t, addr, cert, key, ca, 1)
	h := newMem()
	// A silence timeout far beyond the restart: only the restarted
	// distributor's stateless reset can end the stale connection in time,
	// however long the restart takes on a loaded machine (keepalives
	// still go out every second and meet the new process).
	cl := newClient(t, p, h, func(o *upstream.Options) {
		o.QUIC = wire.ClientQUICConfig()
		wire.SetSilenceTimeout(o.QUIC, time.Minute)
		o.QUIC.KeepAlivePeriod = time.Second
		o.SilenceTimeout = time.Minute
	}, addr)
	cl.start(t)
	cl.c.Subscribe("app/cfg")
	waitHeld(t, h, version("app/cfg", 1, map[string]string{"a": "1"}))

	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.Wait()
	startChild(t, addr, cert, key, ca, 2)
	waitHeld(t, h, version("app/cfg", 2, map[string]string{"a": "2"}))
	var reset *quic.StatelessResetError
	if last := cl.c.Status().LastDisconnect; !errors.As(last, &reset) {
		t.Errorf("the stale connection ended with %v; want a stateless reset from the restarted distributor", last)
	}
}

// freeUDPAddr returns a loopback UDP address nothing listens on now.
func freeUDPAddr(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	return pc.LocalAddr().String()
}

// A distributor that goes silent — a black hole: its host crashed or the
// path is cut, so no reset and no close arrive — is left after the
// client's silence timeout (wire.Liveness), and the agent carries on
// with another distributor of the zone.
func TestSilentDistributorIsLeft(t *testing.T) {
	p := newPKI(t)
	d1 := startDist(t, p, "d1")
	d2 := startDist(t, p, "d2")
	v1 := version("app/cfg", 1, map[string]string{"a": "1"})
	d1.setGoal(t, v1)
	d2.setGoal(t, v1)
	relay, err := faultnet.Listen(d1.srv.Addr().String(), faultnet.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })

	h := newMem()
	cl := newClient(t, p, h, func(o *upstream.Options) { o.SilenceTimeout = time.Second }, relay.Addr(), d2.srv.Addr().String())
	c := cl.c
	cl.start(t)
	c.Subscribe("app/cfg")
	waitHeld(t, h, v1)
	wait.For(t, "connected to d1", func() bool { return c.Status().DistributorID == "d1" })

	relay.Cut(faultnet.Both, true)
	wait.For(t, "failover to d2", func() bool { return c.Status().DistributorID == "d2" })
	var silence *wire.SilenceError
	if last := c.Status().LastDisconnect; !errors.As(last, &silence) {
		t.Errorf("the connection to the silent distributor ended with %v; want the silence timeout", last)
	}
	v2 := version("app/cfg", 2, map[string]string{"a": "2"})
	d2.setGoal(t, v2)
	waitHeld(t, h, v2)
}

// A distributor that cannot hear its agent — the agent's packets are lost,
// or the distributor is too busy to read them — must not forget the
// connection before the agent gives it up: the agent's next packet would
// meet a stateless reset, which an agent takes for its distributor's
// restart and answers by waiting within the redial spread (up to 20 s at
// 10,000 agents). The agent judges silence itself (wire.Liveness) and
// closes with wire.CodeSilent; the distributor forgets a connection only
// after three of the agent's silence timeouts (Hello.silence_timeout).
func TestAgentGivesUpASilentLinkFirst(t *testing.T) {
	p := newPKI(t)
	d := startDist(t, p, "d1")
	v1 := version("app/cfg", 1, map[string]string{"a": "1"})
	d.setGoal(t, v1)
	relay, err := faultnet.Listen(d.srv.Addr().String(), faultnet.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })

	const silence = 2 * time.Second
	h := newMem()
	cl := newClient(t, p, h, func(o *upstream.Options) { o.SilenceTimeout = silence }, relay.Addr())
	c := cl.c
	cl.start(t)
	c.Subscribe("app/cfg")
	waitHeld(t, h, v1)
	wait.For(t, "the distributor counts the agent", func() bool { return d.srv.Stats().Agents == 1 })

	relay.Cut(faultnet.Up, true) // the distributor hears nothing from now on
	wait.For(t, "the agent gives up the silent link", func() bool { return !c.Status().Connected })
	agentGaveUp := time.Now()
	wait.For(t, "the distributor forgets the connection", func() bool { return d.srv.Stats().Agents == 0 })
	// Expected: the agent about 2.7 s after the cut (the silence counts
	// from its next keepalive, as QUIC's idle timeout), the distributor
	// 6 s or more after it last heard the agent. The margin absorbs a
	// loaded machine's late observations.
	if ahead := time.Since(agentGaveUp); ahead < silence/2 {
		t.Fatalf("the distributor forgot the connection %v after its agent gave it up; want at least %v later (it waits three silence timeouts)", ahead.Round(time.Millisecond), silence/2)
	}
	var se *wire.SilenceError
	if last := c.Status().LastDisconnect; !errors.As(last, &se) {
		t.Fatalf("the link ended with %v; want the agent's silence timeout", last)
	}
	relay.Cut(faultnet.Up, false)
	wait.For(t, "the agent connected again", func() bool { return c.Status().Connected })
	v2 := version("app/cfg", 2, map[string]string{"a": "2"})
	d.setGoal(t, v2)
	waitHeld(t, h, v2)
}
