#!/usr/bin/env bash
# Installs the Debian packages on a fresh Debian and checks what
# docs/operations.md, "Install", promises (issue 33: "On a fresh Debian
# machine, make package then dpkg -i of the two packages gives working,
# enabled-on-configure daemons whose --version names the commit").
# `make fresh-debian` runs it; deploy/freshdebian_test.go runs it under
# LEHR_FRESH_DEBIAN=1. Not part of make test: the first run downloads about
# 50 MB from the Debian archive (40 MB of packages and the archive's index)
# and a run takes about 3 minutes.
#
# The fresh Debian is a minimal Debian 12 (debootstrap --variant=minbase,
# plus systemd, systemd-sysv and dbus) cached in .cache/fresh-debian/
# (ignored by git; FRESH_DEBIAN_CACHE moves it), copied anew for each run
# and booted with systemd-nspawn as a container whose PID 1 is systemd:
# so the machine running this needs no systemd of its own. Commands run in
# the container through nsenter (machinectl and systemd-run -M need
# systemd-machined on the host). Needs root, and debootstrap and
# systemd-container (installed from Debian when missing).
#
# What it does, printing PASS or FAIL for each check: make package;
# dpkg -i both packages; the units enabled and not started; the user and
# data directories; --version naming the commit; systemd-analyze verify;
# configure control, a distributor and the agent as docs/operations.md
# says (certificates from lehr certs, env files, signing.pub) and start
# them with systemctl; publish a namespace and watch it reach the agent;
# the socket's modes; lehr_build_info on each /metrics; systemd-analyze
# security; the journal (log levels as priorities); a reboot (enabled
# daemons come back); an upgrade in place (running daemons restarted, a
# stopped one kept stopped); remove (data and settings kept); installing
# again after a remove; purge (data and settings gone); no unit failed or
# stopped uncleanly; the agent's package alone, as on a host; README's
# apt install line. Exits 1 if any check failed.
# The container's tree is kept in .cache/fresh-debian/machine for a look
# afterwards (deleted by the next run), the daemons' journal in
# .cache/fresh-debian/journal.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

[ "$(id -u)" = 0 ] || { echo "fresh-debian: needs root (debootstrap, systemd-nspawn)" >&2; exit 2; }

cache=${FRESH_DEBIAN_CACHE:-$repo/.cache/fresh-debian}
suite=${FRESH_DEBIAN_SUITE:-bookworm}
mirror=${FRESH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
machine_name=lehr-fresh-debian
# FRESH_DEBIAN_NETWORK=host shares this machine's network with the
# container (and its ports): apt-get in it can then reach the archive.
network=--private-network
[ "${FRESH_DEBIAN_NETWORK:-}" = host ] && network=
host=lehr-fresh # the container's hostname: the agent's host id
base=$cache/$suite
machine=$cache/machine
pkgdir=$cache/package
log=$cache/run.log
mkdir -p "$cache"
# one run at a time: the machine's name and tree are fixed
exec 9>"$cache/lock"
flock -n 9 || { echo "fresh-debian: another run holds $cache/lock" >&2; exit 2; }
: >"$log"

apt_install() {
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 ||
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
}
command -v debootstrap >/dev/null || apt_install debootstrap
command -v systemd-nspawn >/dev/null || apt_install systemd-container

fails=0
pass() { echo "PASS $1"; }
fail() {
	echo "FAIL $1"
	fails=$((fails + 1))
	if [ -n "${2:-}" ]; then printf '%s\n' "$2" | sed 's/^/    /' | tail -n 40; fi
}
# check DESCRIPTION COMMAND...: PASS if the command succeeds (its output
# goes to the log), FAIL with its output otherwise.
check() {
	local what=$1 out
	shift
	if out=$("$@" 2>&1); then
		pass "$what"
		printf '== %s\n%s\n' "$what" "$out" >>"$log"
	else
		fail "$what" "$out"
	fi
}

# --- the packages ----------------------------------------------------------
commit=$(git rev-parse HEAD)
echo "fresh-debian: make package (commit $commit)"
[ -z "$(git status --porcelain)" ] ||
	echo "fresh-debian: the tree has uncommitted changes: the binaries will say so (\"with uncommitted changes\", commit=\"…-dirty\")"
rm -rf "$pkgdir"
if ! make package PKGDIR="$pkgdir" >>"$log" 2>&1; then
	fail "make package" "$(tail -n 20 "$log")"
	exit 1
fi
debs=("$pkgdir"/lehr-agent_*.deb "$pkgdir"/lehr_*.deb)
pass "make package: $(cd "$pkgdir" && echo *.deb)"

# --- the fresh Debian ------------------------------------------------------
if [ ! -e "$base/.fresh-debian-complete" ]; then
	echo "fresh-debian: debootstrap $suite into $base (once; about 50 MB from $mirror)"
	rm -rf "$base.tmp"
	debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus "$suite" "$base.tmp" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
		{ fail "debootstrap $suite" "$(tail -n 20 "$cache/debootstrap.log")"; exit 1; }
	touch "$base.tmp/.fresh-debian-complete"
	rm -rf "$base"
	mv "$base.tmp" "$base"
fi
rm -rf "$machine"
cp -a "$base" "$machine"
rm -f "$machine/.fresh-debian-complete"
# debootstrap copies the building machine's hostname; a fresh machine has its own
echo "$host" >"$machine/etc/hostname"
mkdir -p "$machine/root/lehr-debs"
cp "${debs[@]}" "$machine/root/lehr-debs/"

# The container's cgroups go under one of this script's (cgroup_dir), in
# each hierarchy systemd uses, removed at the end: without a systemd on
# the host, nspawn --keep-unit would make them at the root.
cgroup_dirs=()
for h in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified /sys/fs/cgroup; do
	if [ -e "$h/cgroup.procs" ] && { [ "$h" != /sys/fs/cgroup ] || [ -e /sys/fs/cgroup/cgroup.controllers ]; }; then
		mkdir -p "$h/$machine_name" && cgroup_dirs+=("$h/$machine_name")
	fi
done

nspawn_pid=
leader=
boot() {
	(
		for d in "${cgroup_dirs[@]}"; do echo "$BASHPID" >"$d/cgroup.procs"; done
		# --register=no and --keep-unit: there is no systemd-machined nor
		# systemd on the host to register with or to ask for a scope.
		# --private-network: the container has its own loopback only, so
		# its daemons' ports (7400, 7410, ...) meet nothing of this machine's.
		exec systemd-nspawn --boot --directory="$machine" --machine="$machine_name" --hostname="$host" \
			--register=no --keep-unit --console=passive $network
	) >>"$cache/nspawn.log" 2>&1 &
	nspawn_pid=$!
	leader=
	for _ in $(seq 100); do
		leader=$(pgrep -P "$nspawn_pid" -x systemd || true)
		[ -n "$leader" ] && break
		kill -0 "$nspawn_pid" 2>/dev/null || break
		sleep 0.2
	done
	[ -n "$leader" ] || return 1
	# systemctl answers once systemd listens on its private socket: until
	# then "Failed to connect to bus"
	local state
	for _ in $(seq 120); do
		state=$(in_machine timeout 120 systemctl is-system-running --wait 2>&1) || true
		case $state in *"connect to bus"*) sleep 0.5 ;; *) break ;; esac
	done
	echo "fresh-debian: booted ($state), systemd PID $leader"
	[ "$state" = running ] || [ "$state" = degraded ]
}
# in_machine COMMAND...: run it in the container, as root, with a clean
# environment.
in_machine() {
	nsenter --target "$leader" --all -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb "$@"
}
# sh_in SCRIPT: the same, through sh -c, set -e.
sh_in() { in_machine sh -ec "$1"; }
shutdown_machine() {
	[ -n "$nspawn_pid" ] || return 0
	if kill -0 "$nspawn_pid" 2>/dev/null; then
		kill -TERM "$nspawn_pid" 2>/dev/null || true # nspawn halts the container
		for _ in $(seq 60); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.5; done
		kill -KILL "$nspawn_pid" 2>/dev/null || true
	fi
	wait "$nspawn_pid" 2>/dev/null || true
	nspawn_pid=
}
cleanup() {
	if [ -n "$leader" ] && kill -0 "$leader" 2>/dev/null; then
		in_machine journalctl --no-pager -o short-iso -u lehr-control -u lehr-distributor -u lehr-agent >"$cache/journal.txt" 2>&1 || true
	fi
	shutdown_machine
	# nspawn cannot remove this on a /run that is not a tmpfs
	rmdir "/run/systemd/nspawn/propagate/$machine_name" 2>/dev/null || true
	for d in "${cgroup_dirs[@]}"; do
		find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP # cleanup runs on these too

: >"$cache/nspawn.log"
if ! boot; then
	fail "boot the fresh Debian with systemd-nspawn" "$(tail -n 30 "$cache/nspawn.log")"
	exit 1
fi
pass "boot $suite with systemd as PID 1 ($(in_machine systemd --version | head -n 1))"

# --- install ---------------------------------------------------------------
units="lehr-agent lehr-control lehr-distributor"
install_out=$(sh_in 'cd /root/lehr-debs && dpkg -i lehr-agent_*.deb lehr_*.deb' 2>&1) || {
	# what a fresh machine lacks of the Depends: comes from the archive
	# (reachable with FRESH_DEBIAN_NETWORK=host only; minbase has them all)
	install_out+=$'\n'$(sh_in 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -f -y -qq' 2>&1) ||
		{ fail "dpkg -i lehr-agent lehr" "$install_out"; exit 1; }
}
printf '== dpkg -i\n%s\n' "$install_out" >>"$log"
check "dpkg -i lehr-agent lehr: both installed" sh_in 'dpkg-query -W -f="\${Status}\n" lehr-agent lehr | grep -vx "install ok installed" && exit 1; true'
for u in $units; do
	check "$u.service enabled on configure" sh_in "[ \"\$(systemctl is-enabled $u.service)\" = enabled ]"
	check "$u.service not started unconfigured" sh_in "! systemctl is-active --quiet $u.service"
done
if grep -q 'lehr-agent: enabled, not started' <<<"$install_out" && grep -q 'lehr-control.service enabled, not started' <<<"$install_out" &&
	grep -q 'lehr-distributor.service enabled, not started' <<<"$install_out"; then
	pass "the packages say each daemon is enabled, not started, and what to configure"
else
	fail "the packages say each daemon is enabled, not started, and what to configure" "$install_out"
fi
check "system user lehr, no login, no home" sh_in 'getent passwd lehr | grep -q ":/nonexistent:/usr/sbin/nologin$"; [ ! -e /nonexistent ]'
check "/var/lib/lehr-agent lehr:lehr 0710, /var/lib/lehr-control lehr:lehr 0700" \
	sh_in '[ "$(stat -c "%U:%G %a" /var/lib/lehr-agent)" = "lehr:lehr 710" ] && [ "$(stat -c "%U:%G %a" /var/lib/lehr-control)" = "lehr:lehr 700" ]'
check "each unit's Documentation= is installed" sh_in 'for u in lehr-agent lehr-control lehr-distributor; do
	d=$(systemctl show -P Documentation $u.service); [ -n "$d" ]; for f in $d; do f=${f#file://}; [ -s "$f" ] || { echo "$u: $f missing"; exit 1; }; done; done'
for cmd in "lehr --version" "lehr version" "lehr-agent --version"; do
	out=$(in_machine $cmd 2>&1) || true
	if grep -q "$commit" <<<"$out"; then pass "$cmd names the commit"; else fail "$cmd names the commit $commit" "$out"; fi
done
check "systemd-analyze verify of the installed units" sh_in 'out=$(systemd-analyze verify lehr-agent.service lehr-control.service lehr-distributor.service 2>&1); [ -z "$out" ] || { echo "$out"; exit 1; }'

# --- configure and start, as docs/operations.md says --------------------------
check "certificates with lehr certs (operations.md, \"Certificates\")" sh_in "
	cd /etc/lehr/tls
	lehr certs init --dir /etc/lehr/tls
	lehr certs issue --dir /etc/lehr/tls --name control --role control
	lehr certs issue --dir /etc/lehr/tls --name dist-a1 --role distributor --zone zone-a
	lehr certs issue --dir /etc/lehr/tls --name $host --role host --zone zone-a
	mv dist-a1.crt distributor.crt; mv dist-a1.key distributor.key
	mv $host.crt host.crt; mv $host.key host.key"
check "systemctl start lehr-control" sh_in 'systemctl start lehr-control && systemctl is-active --quiet lehr-control'
check "control made its signing key; signing.pub copied to /etc/lehr" sh_in '
	[ -s /var/lib/lehr-control/signing.key ] && install -m 0644 /var/lib/lehr-control/signing.pub /etc/lehr/signing.pub'
check "distributor.env and agent.env set (zone-a, 127.0.0.1)" sh_in '
	printf "LEHR_ZONE=zone-a\nLEHR_CONTROL=127.0.0.1:7400\n" >>/etc/lehr/distributor.env
	printf "LEHR_ZONE=zone-a\nLEHR_DISTRIBUTORS=127.0.0.1:7410\n" >>/etc/lehr/agent.env'
check "systemctl start lehr-distributor" sh_in 'systemctl start lehr-distributor && systemctl is-active --quiet lehr-distributor'
check "systemctl start lehr-agent" sh_in 'systemctl start lehr-agent && systemctl is-active --quiet lehr-agent'
for u in $units; do
	check "systemctl status $u: active (running)" sh_in "systemctl status --no-pager -n 0 $u | grep -q 'Active: active (running)'"
done
check "publish demo/app on control's socket; lehr watch sees it reach the agent" sh_in '
	export LEHR_CONTROL=unix:///run/lehr-control/control.sock
	lehr domain create demo >/dev/null
	echo "{\"greeting\": \"hello from a fresh Debian\"}" >/tmp/app.json
	lehr push demo/app --file /tmp/app.json
	timeout 30 lehr watch --socket /run/lehr/agent.sock demo/app | grep -m1 "demo/app version 1"'
check "the namespace file: /var/lib/lehr-agent/files/demo/app.lehr, lehr:lehr 0640" \
	sh_in '[ "$(stat -c "%U:%G %a" /var/lib/lehr-agent/files/demo/app.lehr)" = "lehr:lehr 640" ]'
check "lehr zones status zone-a: 1 distributor, 1 agent, this build" sh_in '
	for i in $(seq 30); do
		out=$(lehr --control unix:///run/lehr-control/control.sock zones status zone-a 2>&1) || true
		echo "$out" | grep -q "1 distributor reporting, 1 agent connected" && echo "$out" | grep -q "'"${commit:0:12}"'" && { echo "$out"; exit 0; }
		sleep 1
	done; echo "$out"; exit 1'
check "the agent's socket: /run/lehr lehr:lehr 0750, agent.sock lehr:lehr 0660 (consumers join group lehr)" sh_in '
	[ "$(stat -c "%U:%G %a" /run/lehr)" = "lehr:lehr 750" ] && [ "$(stat -c "%U:%G %a" /run/lehr/agent.sock)" = "lehr:lehr 660" ]'
# /metrics of each daemon (the units' LEHR_METRICS_LISTEN defaults), with
# bash's /dev/tcp: a minimal Debian has no curl
for m in lehr-control:7401 lehr-distributor:7411 lehr-agent:7421; do
	check "${m%%:*} /metrics (127.0.0.1:${m#*:}): lehr_build_info names the commit" in_machine bash -c '
		exec 3<>/dev/tcp/127.0.0.1/'"${m#*:}"'; printf "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3
		out=$(cat <&3); grep "^lehr_build_info" <<<"$out" | grep -q "commit=\"'"$commit"'" || { grep "^lehr_build_info" <<<"$out"; exit 1; }'
done
for u in $units; do
	out=$(in_machine systemd-analyze security --no-pager "$u.service" 2>&1 | grep 'Overall exposure level') || true
	score=$(sed -n 's/.*: \([0-9.]*\) .*/\1/p' <<<"$out")
	if [ -n "$score" ] && awk "BEGIN{exit !($score <= 1.5)}"; then
		pass "systemd-analyze security $u.service: $score (at most 1.5)"
	else
		fail "systemd-analyze security $u.service: ${score:-?}, want at most 1.5" "$out"
	fi
done
for u in $units; do
	# The daemons log JSON on stdout (--log-format json), which journald
	# files at priority info whatever the line's level: both are looked at.
	check "journal of $u: JSON lines from the daemon, none at level ERROR, nothing at priority err" sh_in "
		journalctl -q --no-pager -u $u -o cat | grep -q '^{\"time\":'
		out=\$(journalctl -q --no-pager -u $u -o cat | grep '\"level\":\"ERROR\"' || true); [ -z \"\$out\" ] || { echo \"\$out\"; exit 1; }
		out=\$(journalctl -q --no-pager -u $u -p err); [ -z \"\$out\" ] || { echo \"\$out\"; exit 1; }"
done
check "journalctl -p warning -u lehr-control: control's WARN on its new store, at priority warning" sh_in '
	journalctl -q --no-pager -u lehr-control -p warning -o cat | grep -q "\"level\":\"WARN\".*created a new, empty store"
	! journalctl -q --no-pager -u lehr-control -p warning -o cat | grep -q "\"level\":\"INFO\""'

# --- reboot: the enabled daemons come back -----------------------------------
echo "fresh-debian: rebooting the container"
shutdown_machine
if boot; then
	for u in $units; do
		check "after a reboot: $u active" sh_in "systemctl is-active --quiet $u || { systemctl status --no-pager $u; exit 1; }"
	done
else
	fail "reboot the container" "$(tail -n 30 "$cache/nspawn.log")"
	exit 1
fi

# --- upgrade in place: running daemons restarted, a stopped one kept so ---
pids() { for u in $units; do in_machine systemctl show -P MainPID "$u"; done | tr '\n' ' '; }
sh_in 'systemctl stop lehr-distributor'
before=$(pids)
check "dpkg -i the same packages again (an upgrade, to postinst)" sh_in 'cd /root/lehr-debs && dpkg -i lehr-agent_*.deb lehr_*.deb'
after=$(pids)
read -r a0 c0 _ <<<"$before"
read -r a1 c1 d1 <<<"$after"
if [ "$a0" != "$a1" ] && [ "$c0" != "$c1" ] && [ "$a1" != 0 ] && [ "$c1" != 0 ] && [ "$d1" = 0 ]; then
	pass "upgrade: agent and control restarted (MainPID $a0→$a1, $c0→$c1), the stopped distributor kept stopped"
else
	fail "upgrade: agent and control restarted, the stopped distributor kept stopped" "MainPID agent control distributor before: $before; after: $after"
fi
sh_in 'systemctl start lehr-distributor'

# --- remove, install again, purge --------------------------------------------
check "dpkg -r lehr-agent lehr" sh_in 'dpkg -r lehr-agent lehr'
for u in $units; do
	check "after remove: $u stopped" sh_in "! systemctl is-active --quiet $u"
done
check "after remove: data kept (the agent's cache and files, control's etcd and signing key)" sh_in '
	[ -d /var/lib/lehr-agent/cache ] && [ -s /var/lib/lehr-agent/files/demo/app.lehr ] && [ -d /var/lib/lehr-control/etcd ] && [ -s /var/lib/lehr-control/signing.key ]'
check "after remove: settings kept (/etc/lehr/*.env as edited)" sh_in '
	grep -q "^LEHR_ZONE=zone-a" /etc/lehr/agent.env && grep -q "^LEHR_ZONE=zone-a" /etc/lehr/distributor.env && [ -s /etc/lehr/control.env ]'
check "dpkg -i after remove" sh_in 'cd /root/lehr-debs && dpkg -i lehr-agent_*.deb lehr_*.deb'
for u in $units; do
	check "installed again after remove, configured: $u enabled and started" sh_in "[ \"\$(systemctl is-enabled $u)\" = enabled ] && systemctl is-active --quiet $u"
done
check "installed again: the agent still serves demo/app from its kept cache" sh_in '
	timeout 30 lehr watch --socket /run/lehr/agent.sock demo/app | grep -m1 "demo/app version 1"'
check "dpkg -P lehr-agent lehr" sh_in 'dpkg -P lehr-agent lehr'
check "after purge: nothing of the packages in dpkg" sh_in '! dpkg-query -W lehr-agent lehr 2>/dev/null | grep -q .'
for u in $units; do
	check "after purge: $u stopped and gone" sh_in "! systemctl is-active --quiet $u; [ ! -e /lib/systemd/system/$u.service ]"
done
check "after purge: /var/lib/lehr-agent and /var/lib/lehr-control gone" sh_in '[ ! -e /var/lib/lehr-agent ] && [ ! -e /var/lib/lehr-control ]'
check "after purge: env files gone; the operator's certificates and signing.pub kept" sh_in '
	for f in agent.env control.env distributor.env; do [ ! -e /etc/lehr/$f ]; done
	[ -s /etc/lehr/tls/host.crt ] && [ -s /etc/lehr/signing.pub ]'
check "after purge: no enablement or mask of the units left in /etc/systemd" sh_in '
	out=$(find /etc/systemd /var/lib/systemd/deb-systemd-helper-enabled /var/lib/systemd/deb-systemd-helper-masked -name "lehr*" 2>/dev/null || true); [ -z "$out" ] || { echo "$out"; exit 1; }'
check "after purge: the lehr user stays (Debian leaves system users)" sh_in 'getent passwd lehr >/dev/null'
check "over every start and stop of both boots: no lehr unit failed, each stop clean" sh_in '
	out=$(journalctl -q --no-pager -u lehr-agent -u lehr-control -u lehr-distributor -o cat |
		grep -E "Failed with result|Main process exited|code=(exited|killed|dumped)|Killing process|timed out" || true)
	[ -z "$out" ] || { echo "$out"; exit 1; }
	[ "$(journalctl -q --no-pager -u lehr-agent -u lehr-control -u lehr-distributor -o cat | grep -c "Deactivated successfully")" -gt 0 ]'
# A host: the agent's package alone
check "lehr-agent alone (a host): dpkg -i; enabled, not started; --version; purge" sh_in '
	cd /root/lehr-debs && dpkg -i lehr-agent_*.deb
	[ "$(systemctl is-enabled lehr-agent)" = enabled ] && ! systemctl is-active --quiet lehr-agent
	lehr-agent --version | grep -q '"$commit"'
	[ ! -e /usr/bin/lehr ] && [ ! -e /lib/systemd/system/lehr-control.service ]
	dpkg -P lehr-agent && [ ! -e /var/lib/lehr-agent ] && [ ! -e /etc/lehr/agent.env ]'
# README's and operations.md's install line: apt install of the files
check "apt install ./lehr-agent_*.deb ./lehr_*.deb (README's line), then purge again" sh_in '
	cd /root/lehr-debs && DEBIAN_FRONTEND=noninteractive apt-get install -y -q ./lehr-agent_*.deb ./lehr_*.deb
	dpkg-query -W -f="\${Status}\n" lehr-agent lehr | grep -vx "install ok installed" && exit 1
	DEBIAN_FRONTEND=noninteractive apt-get purge -y -q lehr-agent lehr'

echo "fresh-debian: $fails failed; log: $log; the daemons' journal: $cache/journal.txt"
[ "$fails" = 0 ]
