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
	cert, key, err := p.ca.IssueFiles(filepath.Join(p.dir, "leaf"), "distributor", pki.Server, nil, time.Hour)
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
// client's silence timeout (the QUIC idle timeout, wire.SetSilenceTimeout),
// and the agent carries on with another distributor of the zone.
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

	qc := wire.ClientQUICConfig()
	wire.SetSilenceTimeout(qc, time.Second)
	h := newMem()
	cl := newClient(t, p, h, func(o *upstream.Options) { o.QUIC = qc }, relay.Addr(), d2.srv.Addr().String())
	c := cl.c
	cl.start(t)
	c.Subscribe("app/cfg")
	waitHeld(t, h, v1)
	wait.For(t, "connected to d1", func() bool { return c.Status().DistributorID == "d1" })

	relay.Cut(faultnet.Both, true)
	wait.For(t, "failover to d2", func() bool { return c.Status().DistributorID == "d2" })
	var idle *quic.IdleTimeoutError
	if last := c.Status().LastDisconnect; !errors.As(last, &idle) {
		t.Errorf("the connection to the silent distributor ended with %v; want the idle (silence) timeout", last)
	}
	v2 := version("app/cfg", 2, map[string]string{"a": "2"})
	d2.setGoal(t, v2)
	waitHeld(t, h, v2)
}
