package devtour

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// prometheus is a Prometheus server the tour started: it scrapes every
// demo service's /metrics each second, with the labels host (the agent's
// host id) and zone, and is control's metrics source (--metrics-url), so
// canary checks written as queries (docs/canary.md, "Sources:
// agent-scraped and time-series") run against it.
type prometheus struct {
	url     string
	targets string // the file_sd file the services are written to
	cmd     *exec.Cmd
	exited  chan error // Wait's result
}

// FindPrometheus returns the Prometheus server "lehr dev" starts by
// default: bin/prometheus (scripts/deps.sh extracts it there), else
// prometheus on $PATH; "" if neither exists.
func FindPrometheus() string {
	if fi, err := os.Stat(filepath.Join("bin", "prometheus")); err == nil && !fi.IsDir() {
		if p, err := filepath.Abs(filepath.Join("bin", "prometheus")); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	return ""
}

// startPrometheus starts bin with its data and log under dir, listening
// on a free loopback port, scraping the targets of dir/targets.json every
// second (none until writeTargets), and waits until it is ready.
func startPrometheus(ctx context.Context, bin, dir string) (*prometheus, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := &prometheus{targets: filepath.Join(dir, "targets.json")}
	if err := os.WriteFile(p.targets, []byte("[]\n"), 0o644); err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: demo
    file_sd_configs: [{files: [%q], refresh_interval: 1s}]
`, p.targets)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	p.cmd = exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	p.url = "http://" + addr
	exited := make(chan error, 1)
	p.exited = exited
	go func() { exited <- p.cmd.Wait() }()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get(p.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("prometheus exited as it started (%v): see %s", err, filepath.Join(dir, "prometheus.log"))
		case <-ctx.Done():
			p.cmd.Process.Kill()
			<-exited
			return nil, ctx.Err()
		case <-deadline.C:
			p.cmd.Process.Kill()
			<-exited
			return nil, errors.New("prometheus: not ready within 30s: see " + filepath.Join(dir, "prometheus.log"))
		case <-tick.C:
		}
	}
}

// writeTargets makes Prometheus scrape every service, labelled with its
// host and zone.
func (p *prometheus) writeTargets(services []*hostService) error {
	type target struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	var ts []target
	for _, s := range services {
		addr := strings.TrimSuffix(strings.TrimPrefix(s.metrics, "http://"), "/metrics")
		ts = append(ts, target{Targets: []string{addr}, Labels: map[string]string{"host": s.host, "zone": s.zone}})
	}
	b, err := json.MarshalIndent(ts, "", "  ")
	if err != nil {
		return err
	}
	tmp := p.targets + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p.targets)
}

// stop kills Prometheus and waits for it to exit.
func (p *prometheus) stop() {
	if p != nil {
		p.cmd.Process.Kill()
		<-p.exited
	}
}
