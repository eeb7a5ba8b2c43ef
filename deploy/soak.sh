#!/usr/bin/env bash
# deploy/soak.sh [MINUTES] [SEED]: a chaos soak of a whole ktune deployment
# (issue #55; docs/deploy.md, "Chaos soak").
#
# Builds four network namespaces joined by veth links (addresses from
# 198.18.0.0/15 only, no default route: nothing leaves them):
#
#   ktsoak-tr  tracker on 198.18.1.1 (its loopback), store on a small tmpfs
#     ktsoak-t1 198.18.0.1/30 -- ktsoak-p1 198.18.0.2/30  ktsoak-h1: worker, 2 runners
#     ktsoak-t2 198.18.0.5/30 -- ktsoak-p2 198.18.0.6/30  ktsoak-h2: worker, 2 runners
#     ktsoak-tc 198.18.0.9/30 -- ktsoak-pc 198.18.0.10/30 ktsoak-cl: the clients, the
#                                                          QueryBest prober, the chaos
#
# with a token and TLS (a private CA made with openssl in a temporary
# directory), then runs deploy/soak/soak.py inside ktsoak-cl for MINUTES
# (default 10; a fraction is allowed) with the fault schedule drawn from SEED
# (default 1): clients submit, watch, cancel and resubmit jobs while daemons
# are killed and stopped, links go down or lose packets, the store's file
# system fills and runner kernels crash and hang. At the end it checks what
# was stored against what the clients were told and prints the figures.
#
# Everything named ktsoak-* (namespaces, links), the tmpfs and the temporary
# directory are removed before the run (leftovers of a killed one) and after
# it whatever happens (trap on EXIT, INT and TERM), with every process still
# in those namespaces killed. Needs root, iproute2, openssl and Debian's
# python3 with grpcio and grpcio-tools (deploy/install-deps.sh). Exit status
# 0 only when every check held; the last line is the summary. KT_SOAK_KEEP=1
# keeps the temporary directory (logs, store) and prints where it is.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

MINUTES=${1:-10}
SEED=${2:-1}
BUILD=${KT_SOAK_BUILD:-build}
PY=${KT_SOAK_PYTHON:-/usr/bin/python3}
STORE_MB=${KT_SOAK_STORE_MB:-24}
PREFIX=ktsoak-
NS_TR=${PREFIX}tr NS_H1=${PREFIX}h1 NS_H2=${PREFIX}h2 NS_CL=${PREFIX}cl

if ! [[ $MINUTES =~ ^[0-9]+(\.[0-9]+)?$ ]] || ! [[ $SEED =~ ^[0-9]+$ ]]; then
  echo "usage: deploy/soak.sh [MINUTES] [SEED]  (MINUTES > 0, may be fractional; SEED an integer)" >&2
  exit 2
fi

say() { echo "soak: $*"; }
die() {
  echo "soak: $*" >&2
  echo "soak: FAILED before the run: $*"
  exit 1
}

# ---- Cleanup: everything named ktsoak-*, whoever made it -------------------------------------
TMP=
PYPID=
cleanup() {
  local n p l m
  if [ -n "$PYPID" ] && kill -0 "$PYPID" 2>/dev/null; then
    kill -TERM "$PYPID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$PYPID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$PYPID" 2>/dev/null
  fi
  for n in $(ip netns list 2>/dev/null | awk -v p="$PREFIX" 'index($1, p) == 1 {print $1}'); do
    for p in $(ip netns pids "$n" 2>/dev/null); do
      kill -CONT "$p" 2>/dev/null
      kill -KILL "$p" 2>/dev/null
    done
    ip netns del "$n" 2>/dev/null
  done
  for l in $(ip -o link show 2>/dev/null |
      awk -F': ' -v p="$PREFIX" 'index($2, p) == 1 {sub(/@.*/, "", $2); print $2}'); do
    ip link del "$l" 2>/dev/null
  done
  # tmpfs mounts of earlier runs: /tmp/ktsoak.XXXXXX/store
  for m in $(awk '$2 ~ /^\/tmp\/ktsoak\.[A-Za-z0-9]+\/store$/ {print $2}' /proc/mounts); do
    if [ -n "${KT_SOAK_KEEP:-}" ] && [ -n "$TMP" ] && [ "$m" = "$TMP/store" ]; then
      cp -a "$m" "$TMP/store.kept" 2>/dev/null
    fi
    umount -l "$m" 2>/dev/null
  done
  if [ -n "$TMP" ] && [ -d "$TMP" ]; then
    if [ -n "${KT_SOAK_KEEP:-}" ]; then
      echo "soak: kept $TMP (logs in $TMP/logs, the store in $TMP/store.kept)" >&2
    else
      rm -rf "$TMP"
    fi
  fi
  # stale temporary directories of killed runs (no mount left on them)
  for m in /tmp/ktsoak.*; do
    [ -d "$m" ] && [ "$m" != "$TMP" ] && [ ! -e "$m/store.kept" ] &&
      ! grep -q " $m/" /proc/mounts && rm -rf "$m"
  done
}
on_signal() {
  echo "soak: interrupted (signal $1): cleaning up"
  trap - EXIT
  cleanup
  echo "soak: FAILED interrupted by signal $1"
  exit $((128 + $2))
}

# ---- Prerequisites ---------------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || die "needs root (ip netns, mount)"
command -v flock >/dev/null || die "flock is not installed (util-linux)"
# One soak per machine: each removes whatever is named ktsoak-*, so a second
# one would destroy the first (and its build would change the programs the
# first runs). The lock goes with the process holding it (the orchestrator
# and the daemons do not inherit it), so a killed run blocks nothing.
LOCK=${KT_SOAK_LOCK:-/run/lock/ktsoak.lock}
exec 9>"$LOCK" || die "cannot open the lock $LOCK"
flock -n 9 || die "another deploy/soak.sh is running on this machine (it holds $LOCK): one at a time"
# Only the holder of the lock cleans up (a refused run must leave the other's
# namespaces alone).
trap cleanup EXIT
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
for c in ip openssl setpriv mount umount dd; do
  command -v "$c" >/dev/null || die "$c is not installed (bash deploy/install-deps.sh)"
done
"$PY" -c 'import grpc, grpc_tools, google.protobuf' 2>/dev/null ||
  die "$PY lacks grpcio, grpcio-tools or protobuf (bash deploy/install-deps.sh)"
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" >/dev/null || die "meson setup $BUILD failed"
fi
ninja -C "$BUILD" >/dev/null || die "ninja -C $BUILD failed"
for b in tracker/ktune-tracker server/ktune-runner worker/ktune-worker cli/ktune; do
  [ -x "$BUILD/$b" ] || die "$BUILD/$b is missing"
done

cleanup          # leftovers of a run that was killed
TMP=$(mktemp -d /tmp/ktsoak.XXXXXX) || die "mktemp failed"
chmod 700 "$TMP"
mkdir -p "$TMP/logs" "$TMP/store" "$TMP/pb"

# ---- Namespaces and links -------------------------------------------------------------------
ns_setup() {
  local ns h
  for ns in "$NS_TR" "$NS_H1" "$NS_H2" "$NS_CL"; do
    ip netns add "$ns" || return 1
    ip -n "$ns" link set lo up || return 1
  done
  ip -n "$NS_TR" addr add 198.18.1.1/32 dev lo || return 1
  # name:tracker-end address:far-end address:far namespace
  for h in t1:198.18.0.1:p1:198.18.0.2:"$NS_H1" t2:198.18.0.5:p2:198.18.0.6:"$NS_H2" \
           tc:198.18.0.9:pc:198.18.0.10:"$NS_CL"; do
    IFS=: read -r td tip pd pip pns <<<"$h"
    ip link add "$PREFIX$td" type veth peer name "$PREFIX$pd" || return 1
    ip link set "$PREFIX$td" netns "$NS_TR" || return 1
    ip link set "$PREFIX$pd" netns "$pns" || return 1
    ip -n "$NS_TR" addr add "$tip/30" dev "$PREFIX$td" || return 1
    ip -n "$NS_TR" link set "$PREFIX$td" up || return 1
    ip -n "$pns" addr add "$pip/30" dev "$PREFIX$pd" || return 1
    ip -n "$pns" link set "$PREFIX$pd" up || return 1
    ip -n "$pns" route add 198.18.1.1/32 via "$tip" || return 1
  done
  for ns in "$NS_TR" "$NS_H1" "$NS_H2" "$NS_CL"; do
    [ -z "$(ip -n "$ns" route show default)" ] || return 1
  done
}
ns_setup 2>"$TMP/logs/netns.err" || die "namespace set-up failed: $(tail -n 3 "$TMP/logs/netns.err")"

# ---- Token and certificates -----------------------------------------------------------------
certs() {
  cd "$TMP" || return 1
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout ca.key -out ca.pem -days 2 -subj /CN=ktsoak-ca || return 1
  for h in tracker:198.18.1.1 host1:198.18.0.2 host2:198.18.0.6; do
    IFS=: read -r name ip <<<"$h"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout "$name.key" -out "$name.csr" -subj "/CN=$name" || return 1
    printf 'subjectAltName=IP:%s\n' "$ip" >"$name.ext"
    openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile "$name.ext" -out "$name.pem" || return 1
  done
  chmod 600 ./*.key
  (umask 077 && head -c 32 /dev/urandom | base64 >token)
}
(certs) >"$TMP/logs/openssl.log" 2>&1 || die "openssl failed: $(tail -n 3 "$TMP/logs/openssl.log")"

# ---- The store's small file system ----------------------------------------------------------
mount -t tmpfs -o "size=${STORE_MB}m,mode=0700" ktsoak-store "$TMP/store" ||
  die "cannot mount a tmpfs of ${STORE_MB} MiB on $TMP/store"

"$PY" -m grpc_tools.protoc -Iproto --python_out="$TMP/pb" --grpc_python_out="$TMP/pb" \
  proto/ktune.proto 2>"$TMP/logs/protoc.err" || die "protoc failed: $(cat "$TMP/logs/protoc.err")"

say "$MINUTES min, seed $SEED, in $TMP (namespaces ${PREFIX}tr/h1/h2/cl, store tmpfs ${STORE_MB} MiB)"
ip netns exec "$NS_CL" "$PY" -u "$ROOT/deploy/soak/soak.py" --dir "$TMP" --build "$ROOT/$BUILD" \
  --minutes "$MINUTES" --seed "$SEED" --summary "$TMP/summary" 9>&- &
PYPID=$!
wait "$PYPID"
rc=$?
PYPID=
summary=$(cat "$TMP/summary" 2>/dev/null)
[ -n "$summary" ] || summary="soak: FAILED (the orchestrator exited with status $rc before its summary)"

# ---- Nothing may be left ---------------------------------------------------------------------
left=
for ns in "$NS_TR" "$NS_H1" "$NS_H2" "$NS_CL"; do
  p=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  [ -z "$p" ] || left="$left $ns:[$p]"
done
trap - EXIT
cleanup
[ -z "$(ip netns list 2>/dev/null | awk -v p="$PREFIX" 'index($1, p) == 1')" ] ||
  left="$left namespaces"
if [ -n "$left" ]; then
  echo "soak: FAIL processes or namespaces left after the run:$left"
  rc=1
  summary="${summary/soak: PASS/soak: FAILED}; left:$left"
fi
[ "$rc" -eq 0 ] || [[ $summary == *FAIL* ]] || summary="soak: FAILED (status $rc) $summary"
echo "$summary"
exit "$rc"
