#!/usr/bin/env bash
# Installs what the tests need beyond Go and the Go modules, into bin/
# (ignored by git). Each step is skipped when already done. Called by
# scripts/test.sh (so by `make test` and CI); run it by hand before running
# the tests that use these tools yourself.
#
# promtool — Prometheus's `promtool check metrics`, which the tests run on
# every daemon's /metrics (internal/metricshttp/metricstest), and `promtool
# check rules`/`test rules` on the alerting rules and the dashboard's
# queries (deploy/prometheus, deploy/grafana). It comes from
# Debian's prometheus package, of which only the promtool binary (static,
# no dependencies) is extracted into bin/: installing the package would
# also install and start a Prometheus server and pull in its web UI's
# JavaScript libraries, and building promtool from its Go module would
# bring Prometheus's whole dependency tree (every service discovery's
# cloud client) into go.mod. Skipped when bin/promtool exists or a
# promtool is on $PATH (the tests find either).
#
# prometheus — the Prometheus server itself, from the same .deb, extracted
# the same way (usr/bin/prometheus, static) and never installed: the
# package would start a server as a service. The rollouts' monitoring
# check is tested against it (testenv/devcluster, alerts_test.go): the
# test starts it with a rule that fires on a metric the test serves.
# Skipped when bin/prometheus exists or a prometheus is on $PATH. The test
# fails under CI without it and is skipped on a machine without it
# otherwise.
#
# grpcurl — pinned in go.mod as a tool (`go tool grpcurl`); built here into
# Go's build cache ahead of the tests, so that TestGrpcurlLinesInDocsWork
# (cmd/lehr) does not spend its package's time limit compiling it (about a
# minute of CPU on a cold cache: it links gRPC's xDS support).
# curl — control/httpdocs_test.go runs docs/operations.md's curl examples
# of the HTTP/JSON API as written. Debian's curl; skipped when on $PATH.
# lintian — deploy/package_test.go checks the Debian packages `make
# package` builds with Debian's lintian (dpkg-deb comes with dpkg).
# Debian's lintian, without recommends; skipped when on $PATH.
# chromium — the operator console's browser tests (control/console,
# browser_test.go) drive a real headless Chromium through chromedp.
# Debian's chromium package, without recommends (no desktop extras), and
# fonts-dejavu-core so that its screenshots have legible text;
# skipped when a chromium is on $PATH. The tests fail under CI without it
# and are skipped on a machine without it otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

# Both promtool and prometheus come from Debian's prometheus .deb,
# downloaded once (if either is missing) and extracted into bin/.
need=()
for tool in promtool prometheus; do
	if [ -x "bin/$tool" ] || command -v "$tool" >/dev/null; then
		echo "$tool: $(command -v "$tool" || echo "bin/$tool"), present"
	else
		need+=("$tool")
	fi
done
if [ ${#need[@]} -gt 0 ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	# apt-get download fetches the .deb checked against the signed package
	# lists; a fresh machine has none yet, hence the update and retry.
	if ! (cd "$tmp" && apt-get download -qq prometheus 2>/dev/null); then
		apt-get update -qq
		(cd "$tmp" && apt-get download -qq prometheus)
	fi
	mkdir -p bin
	for tool in "${need[@]}"; do
		dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$tmp" "./usr/bin/$tool"
		mv "$tmp/usr/bin/$tool" "bin/$tool"
		echo "$tool: bin/$tool, from $(basename "$tmp"/prometheus_*.deb)"
	done
fi

${GO:-go} tool -n grpcurl >/dev/null
echo "grpcurl: go tool grpcurl, built"
if command -v curl >/dev/null; then
	echo "curl: $(command -v curl), present"
else
	apt-get install -y -qq curl 2>/dev/null || { apt-get update -qq && apt-get install -y -qq curl; }
	echo "curl: $(command -v curl), installed"
fi
if command -v lintian >/dev/null; then
	echo "lintian: $(command -v lintian), present"
else
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lintian >/dev/null 2>&1 ||
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lintian >/dev/null; }
	echo "lintian: $(command -v lintian), installed"
fi
if command -v chromium >/dev/null; then
	echo "chromium: $(command -v chromium), present"
else
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null 2>&1 ||
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; }
	echo "chromium: $(command -v chromium), installed"
fi
