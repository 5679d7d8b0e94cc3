#!/usr/bin/env bash
# Proves README's two commands on a fresh, minimal Debian 12 root file system, as a new user on
# a fresh machine runs them, so that a missing install step cannot hide behind packages that
# were installed on this machine by hand:
#   1. a minbase bookworm root made by mmdebstrap from this machine's apt sources, built once
#      and cached as a tarball in $TF_FRESH_CACHE (default ~/.cache/twofold-fresh, outside the
#      repository); --rebuild-root makes it again;
#   2. unpacked into a scratch folder, with a clean `git archive HEAD` of this repository in
#      /src and, from this machine, only what every machine of this kind has and pip needs to
#      reach the package index: the locally added CA certificates
#      (/usr/local/share/ca-certificates) and the system-wide pip configuration (/etc/pip.conf);
#      plus /etc/resolv.conf for name resolution;
#   3. inside it (chroot in a private mount namespace): `bash scripts/quickstart.sh`, then
#      `bash scripts/test.sh`, then `twofold generate` on the bundled model.
# Prints each step with its time; exits non-zero at the first failure. Needs root, git and
# mmdebstrap (apt-get install mmdebstrap). The whole log is kept in $TF_FRESH_CACHE/last.log.
#
# Usage: bash scripts/check-fresh.sh [--rebuild-root] [--quickstart-only] [--keep]
set -euo pipefail

CACHE=${TF_FRESH_CACHE:-$HOME/.cache/twofold-fresh}
ROOT_TAR=$CACHE/bookworm-minbase.tar
REBUILD=0 QUICK_ONLY=0 KEEP=0
for arg in "$@"; do
  case $arg in
    --rebuild-root) REBUILD=1 ;;
    --quickstart-only) QUICK_ONLY=1 ;;
    --keep) KEEP=1 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check-fresh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

step() { printf '\n== [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { echo "check-fresh: FAILED: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (chroot, mounts)"
command -v mmdebstrap >/dev/null || die "mmdebstrap is not installed (apt-get install mmdebstrap)"
REPO=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
COMMIT=$(git -C "$REPO" rev-parse --short HEAD)
mkdir -p "$CACHE"
exec > >(tee "$CACHE/last.log") 2>&1

if [ ! -s "$ROOT_TAR" ] || [ $REBUILD -eq 1 ]; then
  SOURCES=/etc/apt/sources.list.d/debian.sources
  [ -f "$SOURCES" ] || SOURCES=/etc/apt/sources.list
  step "building a minbase Debian 12 root from $SOURCES into $ROOT_TAR"
  mmdebstrap --variant=minbase --format=tar bookworm "$ROOT_TAR.tmp" "$SOURCES" ||
    die "mmdebstrap could not build the root"
  mv "$ROOT_TAR.tmp" "$ROOT_TAR"
else
  step "using the cached root $ROOT_TAR ($(date -r "$ROOT_TAR" +%F))"
fi

R=$(mktemp -d /tmp/twofold-fresh.XXXXXX)
cleanup() {
  if [ $KEEP -eq 1 ]; then echo "kept the root at $R"; else rm -rf "$R"; fi
}
trap cleanup EXIT
step "unpacking the root into $R"
tar -C "$R" -xf "$ROOT_TAR"
echo "packages in the fresh root: $(chroot "$R" dpkg-query -W | wc -l)"

step "copying git archive HEAD ($COMMIT) to /src, CA certificates, pip.conf, resolv.conf"
mkdir -p "$R/src"
git -C "$REPO" archive HEAD | tar -C "$R/src" -xf -
mkdir -p "$R/usr/local/share/ca-certificates"
cp -v /usr/local/share/ca-certificates/* "$R/usr/local/share/ca-certificates/" 2>/dev/null || true
[ -f /etc/pip.conf ] && cp -v /etc/pip.conf "$R/etc/pip.conf"
cp -v --remove-destination /etc/resolv.conf "$R/etc/resolv.conf"

# The commands run in the root, in README's words, each timed; a failure stops the script.
cat > "$R/run-readme.sh" <<EOF
set -euo pipefail
cd /src
t0=\$(date +%s)
echo "== README command 1: bash scripts/quickstart.sh"
bash scripts/quickstart.sh
t1=\$(date +%s); echo "== quickstart: ok in \$((t1 - t0)) s"
if [ $QUICK_ONLY -eq 0 ]; then
  echo "== README command 2: bash scripts/test.sh"
  bash scripts/test.sh
  t2=\$(date +%s); echo "== test.sh: ok in \$((t2 - t1)) s"
fi
echo "== twofold generate on the bundled model"
./build/tools/twofold generate -m models/tiny-main -p "In the beginning" -n 24 --temp 0
EOF

step "running README's commands inside the fresh root (chroot, private mounts)"
unshare --mount --fork bash -euo pipefail -c '
  R=$1
  mount --make-rprivate /
  mount -t proc proc "$R/proc"
  mount --rbind /dev "$R/dev"
  mount -t tmpfs tmpfs "$R/dev/shm"
  mount --rbind /sys "$R/sys"
  mount -t tmpfs tmpfs "$R/tmp"
  exec chroot "$R" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    TERM=dumb LANG=C.UTF-8 /bin/bash /run-readme.sh
' _ "$R" || die "README's commands failed in the fresh root (log: $CACHE/last.log)"

step "check-fresh: OK (commit $COMMIT: README's commands succeed on a fresh Debian 12 root)"
