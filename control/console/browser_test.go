package console_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image"
	"image/png"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"lehr.dev/lehr/client/producer"
	"lehr.dev/lehr/control/controltest"
	"lehr.dev/lehr/internal/services"
	"lehr.dev/lehr/proto/lehrpb"
	"lehr.dev/lehr/testenv/devcluster"
	"lehr.dev/lehr/testenv/wait"
)

// The console in a real browser: Debian's chromium, headless, driven by
// chromedp. Every page loads without a console error, shows the figures
// the API answers for the same object, follows a rollout while it runs,
// and an action works for an operator and is refused for a publisher.
// Screenshots are written to the test's artifact directory (go test
// -artifacts -outputdir DIR keeps them; DIR/<package>/<test>/…).

// chromium returns the browser's path: $LEHR_CHROMIUM, or chromium on
// $PATH. Without one the test fails under CI (CI=true), which must have
// it from scripts/deps.sh, and is skipped elsewhere.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LEHR_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on $PATH (nor $LEHR_CHROMIUM): run scripts/deps.sh, which installs Debian's chromium package"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browser is a headless chromium for one test, recording the errors its
// pages report (console errors, exceptions, the browser's error log:
// failed loads, refused content).
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string

	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
		chromedp.Flag("hide-scrollbars", true),
	)
	if os.Geteuid() == 0 {
		// Chromium's sandbox refuses to run as root (CI runs as root).
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	b := &browser{t: t, ctx: ctx, dir: t.ArtifactDir()}
	msgs := chromedp.Console(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { cancel2(); <-done })
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == "error" || m.Type == "assert" {
				b.mu.Lock()
				b.errors = append(b.errors, fmt.Sprintf("%s (%s) %s", m.Type, m.Source, m.String()))
				b.mu.Unlock()
			}
		}
	}()
	b.run("start chromium", chromedp.Navigate("about:blank"))
	return b
}

// run runs actions within a minute.
func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// get runs one action that answers, within a minute.
func get[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// open loads u, checks that it loaded without errors, and screenshots it
// as name.png.
func (b *browser) open(u, name string) {
	b.t.Helper()
	b.run("open "+u, chromedp.Navigate(u), chromedp.WaitReady(chromedp.CSS("footer")))
	b.noErrors(u)
	b.shot(name)
}

// noErrors fails the test for every error reported since the last call
// (waiting a moment for the browser's messages to arrive).
func (b *browser) noErrors(what string) {
	b.t.Helper()
	time.Sleep(200 * time.Millisecond)
	b.mu.Lock()
	errs := b.errors
	b.errors = nil
	b.mu.Unlock()
	for _, e := range errs {
		b.t.Errorf("%s: the browser reported an error: %s", what, e)
	}
}

// shot writes a full-page screenshot.
func (b *browser) shot(name string) {
	b.t.Helper()
	// Quality 100 is a PNG (below, a JPEG).
	png := get(b, "screenshot "+name, chromedp.FullScreenshot(100))
	path := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", path)
}

// readmeShots, if set, is where the tests also write the README's
// screenshots (docs/images), taken from the run:
//
//	go test ./control/console -run 'TestBrowser(CanaryFailed|Experiments)' -console.readme-shots "$PWD/docs/images"
//
// (a relative DIR is the package's directory's: go test runs there).
var readmeShots = flag.String("console.readme-shots", "", "also write the README's screenshots to `DIR` (docs/images)")

// readmeShot writes, when -console.readme-shots is set, a screenshot of
// the first element sel matches — the page cropped to it and, if until
// is not "", cut below the first element until matches — as
// DIR/name.png, compressed as far as PNG goes.
func (b *browser) readmeShot(name, sel, until string) {
	b.t.Helper()
	if *readmeShots == "" {
		return
	}
	shot := get(b, "screenshot "+name, chromedp.Screenshot(chromedp.CSS(sel), chromedp.NodeVisible))
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		b.t.Fatal(err)
	}
	if until != "" {
		// Screenshot's scale is 1: an image pixel is a CSS pixel.
		top := get(b, "the box of "+sel, chromedp.Dimensions(chromedp.CSS(sel), chromedp.NodeVisible)).Border[1]
		bottom := get(b, "the box of "+until, chromedp.Dimensions(chromedp.CSS(until), chromedp.NodeVisible)).Border[5]
		r := img.Bounds()
		if h := int(bottom-top) + 12; h < r.Dy() {
			r.Max.Y = r.Min.Y + h
			img = img.(interface {
				SubImage(image.Rectangle) image.Image
			}).SubImage(r)
		}
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&buf, img); err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(*readmeShots, name+".png")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("README screenshot %s (%d KiB)", path, buf.Len()>>10)
}

// shotOf writes a screenshot of the first element sel matches.
func (b *browser) shotOf(name, sel string) {
	b.t.Helper()
	png := get(b, "screenshot "+name, chromedp.Screenshot(chromedp.CSS(sel), chromedp.NodeVisible))
	path := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", path)
}

// text returns the visible text of the first element sel matches.
func (b *browser) text(sel string) string {
	b.t.Helper()
	return strings.TrimSpace(get(b, "read "+sel, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible)))
}

// count returns how many elements sel matches.
func (b *browser) count(sel string) int {
	b.t.Helper()
	return len(get(b, "count "+sel, chromedp.Nodes(chromedp.CSSAll(sel), chromedp.AtLeast(0))))
}

// A dev cluster (as lehr dev runs it): two zones of three hosts, each
// host's consumer subscribed to shop/web; version 2 rolls out under a
// policy whose first stage, zone-a, bakes an hour. The pages show what
// the API says of the zones, the namespace and the rollout; a pause asked
// through the API shows on the rollout page, which reloads itself; and
// pause and resume work from the page (dev mode: an unidentified caller
// may act).
func TestBrowserDevCluster(t *testing.T) {
	b := newBrowser(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := devcluster.Start(ctx, devcluster.Options{Zones: []string{"zone-a", "zone-b"}, AgentsPerZone: 3, Domains: []string{"shop"},
		ControlHTTPListen: "127.0.0.1:0", Rollouts: true, RolloutInterval: 100 * time.Millisecond, NoSync: true,
		Logger: controltest.Logger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	base := "http://" + c.ControlHTTPAddr()
	prod := c.Producer()
	api := prod.RPC()
	first := bakingPolicy()
	first.Stages[0].Name = "zone-a"
	first.Stages[0].Target = &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Zones: []string{"zone-a"}}}
	first.Stages = append(first.Stages, &lehrpb.RolloutStage{Name: "zone-b", Target: &lehrpb.RolloutStage_Zones{Zones: &lehrpb.ZonesTarget{Zones: []string{"zone-b"}}}})
	if _, err := prod.SetRolloutPolicy(ctx, "shop", first, "bake zone-a for an hour", 0); err != nil {
		t.Fatal(err)
	}
	for _, z := range c.Zones() {
		for i := range 3 {
			cl, err := c.Consumer(z, i)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cl.Subscribe(ctx, "shop/web"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cl.Close() })
		}
	}
	for _, v := range []string{"1", "2"} {
		if _, err := prod.Publish(ctx, "shop/web", []producer.Property{{Key: "limit", Value: []byte(v)}}); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, "zone-a's hosts at version 2 and zone-b's at 1, as the distributors report", func() bool {
		return hostsAt(t, api, "zone-a", "shop/web", 2) == 3 && hostsAt(t, api, "zone-b", "shop/web", 1) == 3
	})
	wait.For(t, "version 2's rollout baking zone-a", func() bool {
		r, err := api.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "shop/web", Version: 2})
		return err == nil && r.GetStageAppliedTime() != nil
	})

	// Fleet: each zone's distributors and agents, as GetZoneStatus says.
	b.open(base+"/", "fleet")
	for _, z := range c.Zones() {
		st, err := api.GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: z})
		if err != nil {
			t.Fatal(err)
		}
		agents := 0
		for _, d := range st.GetDistributors() {
			agents += int(d.GetAgents())
		}
		row := `#zones tr[data-zone="` + z + `"] `
		if got, want := b.text(row+`[data-field="agents"]`), strconv.Itoa(agents); got != want || agents != 3 {
			t.Errorf("fleet page: %s has %s agents; GetZoneStatus says %s (want 3)", z, got, want)
		}
		if got, want := b.text(row+`[data-field="distributors"]`), strconv.Itoa(len(st.GetDistributors())); got != want {
			t.Errorf("fleet page: %s has %s distributors; GetZoneStatus says %s", z, got, want)
		}
		// Builds: distributors' and agents' per build, as GetZoneStatus
		// sums them (every one says its build: none is "unknown").
		builds := func(cs []*lehrpb.BuildCount) string {
			var parts []string
			for _, c := range cs {
				parts = append(parts, fmt.Sprintf("%s ×%d", c.GetBuild(), c.GetCount()))
			}
			return strings.Join(parts, ", ")
		}
		want := builds(st.GetDistributorBuilds()) + " · " + builds(st.GetAgentBuilds())
		if got := b.text(row + `[data-field="builds"]`); got != want || len(st.GetAgentBuilds()) == 0 || strings.Contains(want, "unknown") {
			t.Errorf("fleet page: %s's builds %q; GetZoneStatus says %q (want every component's build known)", z, got, want)
		}
	}
	if n := b.count(`#rollouts a[href="/console/rollouts/shop/web/2"]`); n != 1 {
		t.Errorf("fleet page: %d links to the rollout in flight, want 1", n)
	}

	// Domain and namespace: the goal and the hosts per version per zone.
	b.open(base+"/console/domains/shop", "domain")
	d, err := api.GetDomain(ctx, &lehrpb.GetDomainRequest{Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := b.text(`tr[data-quota="namespaces"] [data-field="used"]`), strconv.Itoa(int(d.GetUsage().GetNamespaces())); got != want {
		t.Errorf("domain page: %s namespaces used; GetDomain says %s", got, want)
	}
	// Subscribers: each zone's consumers and their services (the test
	// binary's name, "console.test", as no consumer names one), as
	// GetZoneStatus sums them.
	consumersOf := func(z string) (int, string) {
		st, err := api.GetZoneStatus(ctx, &lehrpb.GetZoneStatusRequest{Zone: z})
		if err != nil {
			return -1, ""
		}
		n, svcs := 0, map[string]int{}
		for _, vc := range st.GetVersions() {
			if vc.GetNamespace() == "shop/web" {
				n += int(vc.GetConsumers())
				for _, s := range vc.GetServices() {
					svcs[s.GetService()] += int(s.GetConsumers())
				}
			}
		}
		var parts []string
		for _, s := range services.Top(svcs) {
			parts = append(parts, fmt.Sprintf("%s %d", s.GetService(), s.GetConsumers()))
		}
		return n, strings.Join(parts, ", ")
	}
	wait.For(t, "every zone's 3 consumers of shop/web reported", func() bool {
		a, _ := consumersOf("zone-a")
		b, _ := consumersOf("zone-b")
		return a == 3 && b == 3
	})
	b.open(base+"/console/namespaces/shop/web", "namespace")
	for _, z := range c.Zones() {
		n, svcs := consumersOf(z)
		row := `#zones tr[data-zone="` + z + `"] `
		if got := b.text(row + `[data-field="consumers"]`); got != strconv.Itoa(n) || n != 3 {
			t.Errorf("namespace page: %s has %s consumers; GetZoneStatus says %d (want 3)", z, got, n)
		}
		if got := b.text(row + `[data-field="services"]`); got != svcs || svcs != "console.test 3" {
			t.Errorf("namespace page: %s's services %q; GetZoneStatus says %q (want %q)", z, got, svcs, "console.test 3")
		}
	}
	for z, want := range map[string]uint64{"zone-a": 2, "zone-b": 1} {
		g, err := api.GetGoals(ctx, &lehrpb.GetGoalsRequest{Zone: z, Namespace: "shop/web"})
		if err != nil || len(g.GetGoals()) != 1 {
			t.Fatalf("GetGoals %s: %v %v", z, g, err)
		}
		row := `#zones tr[data-zone="` + z + `"] `
		if got := b.text(row + `[data-field="goal"]`); got != strconv.FormatUint(g.GetGoals()[0].GetVersion(), 10) || got != strconv.FormatUint(want, 10) {
			t.Errorf("namespace page: %s's goal %s; GetGoals says %d (want %d)", z, got, g.GetGoals()[0].GetVersion(), want)
		}
		if got := b.text(row + `[data-field="atgoal"]`); got != "3" {
			t.Errorf("namespace page: %s has %s hosts at its goal, want 3", z, got)
		}
	}
	b.open(base+"/console/namespaces/shop/web/diff?from=1&to=2", "diff")

	// The rollout, live: a pause asked through the API shows on the page,
	// which reloads itself.
	b.open(base+"/console/rollouts/shop/web/2", "rollout-running")
	if got := b.text("#state"); !strings.EqualFold(got, "running") {
		t.Errorf("rollout page's state %q, want running", got)
	}
	if got := b.text("#reason"); !strings.Contains(got, "baking") || !strings.Contains(got, " left") {
		t.Errorf("rollout page's reason %q: want the bake and its time left", got)
	}
	if _, err := api.UpdateRollout(ctx, &lehrpb.UpdateRolloutRequest{Namespace: "shop/web", Version: 2, Action: lehrpb.RolloutAction_ROLLOUT_ACTION_PAUSE, Author: "ops"}); err != nil {
		t.Fatal(err)
	}
	b.run("the page follows the pause", chromedp.WaitVisible(chromedp.CSS(`p#state.state-paused`)))
	b.noErrors("the rollout page reloading")
	b.shot("rollout-paused")

	// Resume from the page: the button, the confirmation, the form.
	b.run("resume from the page", chromedp.Click(chromedp.CSS("#action-resume")), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	b.shot("confirm-resume")
	b.run("confirm", chromedp.SendKeys(chromedp.CSS("#message"), "go on"), chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS(`p#state`)))
	b.noErrors("resume")
	wait.For(t, "the rollout to run again", func() bool {
		r, err := api.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "shop/web", Version: 2})
		return err == nil && r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_RUNNING
	})
	b.open(base+"/console/audit?domain=shop&method=UpdateRollout", "audit")
	if got := b.count(`table.audit tbody tr`); got != 2 {
		t.Errorf("audit page filtered on UpdateRollout: %d records, want 2 (the pause, the resume)", got)
	}
	if got := b.text(`table.audit tbody tr td.message`); got != "go on" {
		t.Errorf("audit page's newest UpdateRollout message %q, want the one typed on the confirmation page", got)
	}
}

// hostsAt is how many hosts of zone hold ns at version v, as its
// distributors report.
func hostsAt(t *testing.T, api lehrpb.ControlClient, zone, ns string, v uint64) int {
	st, err := api.GetZoneStatus(testCtx(t), &lehrpb.GetZoneStatusRequest{Zone: zone})
	if err != nil {
		return 0
	}
	for _, vc := range st.GetVersions() {
		if vc.GetNamespace() == ns && vc.GetVersion() == v {
			return int(vc.GetAgents())
		}
	}
	return 0
}

// asUser is a plaintext HTTP front for user's client certificate to
// control's HTTPS listener: the browser's stand-in for a client
// certificate. Chromium chooses a client certificate through a dialog or a
// system-wide policy file (AutoSelectCertificateForUrls in
// /etc/chromium/policies), neither of which a test may use; through this
// front, control sees user's certificate on the TLS connection it
// verifies, exactly as from a browser holding it. The Host header is the
// browser's, so the console's same-origin check sees what a browser
// would.
func asUser(t *testing.T, m *mtls, user string) string {
	t.Helper()
	target, err := url.Parse(m.base)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: m.clientTLS(t, user)}
	t.Cleanup(tr.CloseIdleConnections)
	proxy := &httputil.ReverseProxy{Transport: tr, Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host
		r.Out.Header.Del("X-Forwarded-For")
	}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}

// Under mutual TLS, the console is its caller's certificate: alice, an
// operator of shop, sees the actions and pauses the rollout from the page;
// bob, a publisher, sees the page read-only and is refused the action
// with control's own answer.
func TestBrowserOperatorAndPublisher(t *testing.T) {
	b := newBrowser(t)
	m := startMTLS(t, "admin")
	ctx := testCtx(t)
	seed(t, m.srv.Client, &lehrpb.Acl{Admins: []string{"admin"}, Operators: []string{"alice"}, Publishers: []string{"bob"}})

	bob := asUser(t, m, "bob")
	b.open(bob+"/console/rollouts/shop/web/2", "publisher-rollout")
	if got := b.text("header .who"); got != "bob" {
		t.Errorf("the console knows bob as %q", got)
	}
	if n := b.count("#actions a.button"); n != 0 {
		t.Errorf("bob, a publisher, is offered %d actions; want none", n)
	}
	if got := b.text("#read-only"); !strings.Contains(got, `user "bob" may not call UpdateRollout`) {
		t.Errorf("bob's rollout page says %q; want control's refusal", got)
	}
	b.run("bob asks for the pause", chromedp.Navigate(bob+"/console/rollouts/shop/web/2/pause"), chromedp.WaitVisible(chromedp.CSS("#error")))
	b.shot("publisher-refused")
	if got := b.text("#error"); !strings.Contains(got, "403") || !strings.Contains(got, "acl.operators") {
		t.Errorf("bob's confirmation page: %q; want 403 naming the ACL list", got)
	}
	b.mu.Lock()
	b.errors = nil // the 403 itself is reported as a failed load
	b.mu.Unlock()

	alice := asUser(t, m, "alice")
	b.open(alice+"/console/rollouts/shop/web/2", "operator-rollout")
	if got := b.text("header .who"); got != "alice" {
		t.Errorf("the console knows alice as %q", got)
	}
	b.run("alice pauses", chromedp.Click(chromedp.CSS("#action-pause")), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.SendKeys(chromedp.CSS("#message"), "checking the dashboards"), chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS("p#state")))
	b.noErrors("alice's pause")
	wait.For(t, "the rollout to pause", func() bool {
		r, err := m.srv.Client.GetRollout(ctx, &lehrpb.GetRolloutRequest{Namespace: "shop/web", Version: 2})
		return err == nil && r.GetState() == lehrpb.RolloutState_ROLLOUT_STATE_PAUSED
	})
	b.open(alice+"/console/rollouts/shop/web/2", "operator-paused")
	if n := b.count("#action-resume"); n != 1 {
		t.Errorf("alice is offered %d resume buttons on the paused rollout, want 1", n)
	}
	recs, err := m.srv.Client.ListAuditRecords(ctx, &lehrpb.ListAuditRecordsRequest{Domain: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	last := recs.GetRecords()[len(recs.GetRecords())-1]
	if last.GetMethod() != "UpdateRollout" || last.GetAuthor() != "alice" || last.GetMessage() != "checking the dashboards" {
		t.Errorf("last audit record %v; want alice's pause with her message", last)
	}
}
