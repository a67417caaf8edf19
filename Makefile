# Lehr — see README.md. Every target works on a fresh machine with Go.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
PROTOC_VERSION := 3.21.12

.PHONY: all build package fresh-debian run test lint proto chaos upgrade ha bench bench-full bench-canary clean

all: build

# VERSION is the release this tree builds: the VERSION file ("0.1.0" at a
# release, "0.2.0-dev" between releases; docs/operations.md, "Versions").
# make build stamps it into every binary (internal/buildinfo), with the
# commit, its time and whether the tree had uncommitted changes as git
# tells them: the Go toolchain records these itself only in a checkout
# whose .git is a directory, not in a git worktree, nor under GOFLAGS=
# -buildvcs=false; outside git they stay empty. "make build
# VERSION=0.1.0-rc.1" stamps another version. A binary built without the
# stamp (go run, go test, a plain go build) says "devel".
VERSION := $(shell cat $(CURDIR)/VERSION)
COMMIT := $(shell git rev-parse HEAD 2>/dev/null)
COMMIT_TIME := $(shell git log -1 --format=%cI 2>/dev/null)
MODIFIED := $(shell [ -n "$$(git status --porcelain 2>/dev/null)" ] && echo true)
BUILDINFO := lehr.dev/lehr/internal/buildinfo
LDFLAGS := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) \
	-X $(BUILDINFO).commitTime=$(COMMIT_TIME) -X $(BUILDINFO).modified=$(MODIFIED)

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# package builds the Debian packages lehr-agent (hosts) and lehr (control,
# distributors, the CLI) into $(PKGDIR) (bin/package), for this machine's
# architecture, with nfpm (pinned in go.mod as a tool). The binaries are
# built as make build builds them, plus Debian's hardening (PIE, immediate
# binding: lintian checks both), and without symbol tables (the version
# and commit stay: internal/buildinfo). Contents, maintainer scripts and
# conffiles are in deploy/package/; what they do is in docs/operations.md,
# "Install". deploy/package_test.go builds them with this target and checks
# them with lintian and dpkg-deb.
PKGDIR ?= $(BIN)/package
DEB_ARCH ?= $(shell $(GO) env GOARCH)
package:
	@mkdir -p $(PKGDIR)/bin
	$(GO) build -buildmode=pie -trimpath -ldflags '$(LDFLAGS) -s -w -bindnow' -o $(PKGDIR)/bin/ ./cmd/lehr ./cmd/lehr-agent
	for p in lehr lehr-agent; do \
		printf '%s (%s-1) unstable; urgency=medium\n\n  * Lehr %s, commit %s.\n\n -- Lehr maintainers <lehr@lehr.dev>  %s\n' \
			$$p "$$(echo '$(VERSION)' | tr - '~')" '$(VERSION)' '$(COMMIT)' "$$(date -R -u -d '$(or $(COMMIT_TIME),now)')" | \
			gzip -n -9 > $(PKGDIR)/bin/$$p.changelog.Debian.gz; \
		VERSION=$(VERSION) DEB_ARCH=$(DEB_ARCH) LEHR_PKG_BIN=$(PKGDIR)/bin \
			$(GO) tool nfpm package --packager deb --config deploy/package/$$p.yaml --target $(PKGDIR)/ || exit 1; \
	done

# fresh-debian installs the packages on a fresh Debian and checks what
# docs/operations.md, "Install", promises, printing PASS or FAIL for each
# check (scripts/fresh-debian.sh): make package, then a minimal Debian 12
# (debootstrap, cached in .cache/fresh-debian, ignored by git) booted with
# systemd-nspawn, dpkg -i of both packages, the daemons configured and
# started with systemctl, a reboot, an upgrade, remove and purge. As root;
# not in make test (the first run downloads about 50 MB; a run takes
# about 3 minutes). go test ./deploy runs it under LEHR_FRESH_DEBIAN=1.
fresh-debian:
	./scripts/fresh-debian.sh

# run starts the whole system locally on embedded etcd and shows it working.
run: build
	$(BIN)/lehr dev

# test runs every test with the race detector, plus brief fuzzing.
test:
	./scripts/test.sh

# lint checks formatting, vet, that go.mod/go.sum are tidy (every direct
# dependency listed as direct, nothing unused), that no tracked file is
# over 2 MiB (a binary built in the tree once made a submission too big),
# and that Google's api-linter (a tool directive in go.mod) finds no
# problem in the API's protos, proto/lehr/v1, under proto/api-linter.yaml
# (docs/design.md, "The API contract, linted"). api-linter reads the
# Google protos they import from proto/google, as protoc does.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod/go.sum are not tidy: run 'go mod tidy' (diff: go mod tidy -diff)"; exit 1; }
	@big=$$(git ls-files -z | xargs -0 -r du -k 2>/dev/null | awk '$$1 > 2048 {print $$2}'); if [ -n "$$big" ]; then echo "tracked files over 2 MiB (a built binary? build into ./bin, which is ignored):"; echo "$$big"; exit 1; fi
	@cd proto && out=$$($(GO) tool api-linter --set-exit-status --config api-linter.yaml \
		lehr/v1/*.proto 2>&1) || \
		{ echo "api-linter (proto/api-linter.yaml) found problems in proto/lehr/v1: fix them, or disable the rule with its reason"; echo "$$out"; exit 1; }

# proto regenerates proto/lehrpb from proto/lehr/v1/*.proto. protoc comes from
# Debian's protobuf-compiler $(PROTOC_VERSION) (installed if missing); the Go
# plugins are pinned by the tool directives in go.mod. The Google API protos
# Lehr imports (google/longrunning, google/api, google/rpc) are vendored under
# proto/google (proto/google/README.md); the well-known google/protobuf ones
# come with protoc.
# The grpc-gateway plugin writes the HTTP/JSON handlers of the methods
# with a google.api.http option (control.pb.gw.go).
proto:
	@command -v protoc >/dev/null || (apt-get update -qq && apt-get install -y -qq protobuf-compiler)
	@protoc --version | grep -q '$(PROTOC_VERSION)' || echo "warning: protoc is not $(PROTOC_VERSION); output may differ"
	$(GO) build -o $(BIN)/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	$(GO) build -o $(BIN)/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
	$(GO) build -o $(BIN)/protoc-gen-grpc-gateway github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway
	protoc -I proto \
		--plugin=protoc-gen-go=$(BIN)/protoc-gen-go --plugin=protoc-gen-go-grpc=$(BIN)/protoc-gen-go-grpc \
		--plugin=protoc-gen-grpc-gateway=$(BIN)/protoc-gen-grpc-gateway \
		--go_out=. --go_opt=module=lehr.dev/lehr \
		--go-grpc_out=. --go-grpc_opt=module=lehr.dev/lehr \
		--grpc-gateway_out=. --grpc-gateway_opt=module=lehr.dev/lehr,omit_package_doc=true \
		proto/lehr/v1/*.proto

# chaos runs the long kill matrix, the lossy-link run and the long rolling
# upgrade (about 16 minutes): real processes killed with SIGKILL and at
# crash points, and replaced one by one by this tree's binaries
# (testenv/chaos). "make test" runs a short matrix with fixed seeds. The
# figures are appended to bench/results/<timestamp>-chaos.md.
chaos:
	@mkdir -p bench/results
	$(GO) test -count=1 -timeout 90m -v -run 'TestKillMatrix|TestLossyLink|TestRollingUpgrade' ./testenv/chaos \
		-args -chaos.long -chaos.report $(CURDIR)/bench/results/$$(date -u +%Y%m%dT%H%M%SZ)-chaos.md

# upgrade runs the short rolling upgrade (about 2 minutes, the first time
# most of it building the previous release): a cluster started on binaries
# built from the commit in testenv/chaos/upgrade-from, its control,
# distributors and agents replaced one by one by this tree's, then rolled
# back, with publishes flowing (docs/operations.md, "Upgrades"). The
# figures are appended to bench/results/<timestamp>-upgrade.md.
upgrade:
	@mkdir -p bench/results
	$(GO) test -count=1 -timeout 30m -v -run 'TestRollingUpgrade' ./testenv/chaos \
		-args -chaos.upgrade -chaos.report $(CURDIR)/bench/results/$$(date -u +%Y%m%dT%H%M%SZ)-upgrade.md

# ha runs issue 29's HA suite, long version (about 8 minutes): a 3-member
# etcd cluster of separate processes, two control replicas on it, a
# distributor and two agents, while it kills the etcd leader, the
# strategist's replica mid-canary, the replica the distributor is connected
# to, and etcd's quorum; then it restores the cluster from a backup as
# docs/operations.md writes it, with etcdutl, 1,000 namespaces in the store
# (testenv/ha). "make test" runs a short version. The figures are appended
# to bench/results/<timestamp>-ha.md.
ha:
	@mkdir -p bench/results
	$(GO) test -count=1 -timeout 90m -v -run 'TestHA$$' ./testenv/ha \
		-args -ha.long -ha.report $(CURDIR)/bench/results/$$(date -u +%Y%m%dT%H%M%SZ)-ha.md

bench:
	./scripts/bench.sh quick

bench-full:
	./scripts/bench.sh full

# The canary judges on 192,000 seeded fleets (issue 10): no cluster, CPU only.
bench-canary:
	./scripts/bench.sh full -scenario '^canary$$'

clean:
	rm -rf $(BIN)
