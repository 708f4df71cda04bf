#!/usr/bin/env bash
# Builds the real node's images without Docker or a registry, as OCI image layout tarballs
# (see oci_pack.py), cached by a hash of their inputs under
#   ${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator/images/
#
#   hack/images/build.sh pause     localhost/pause:local      the pod sandbox image (static C)
#   hack/images/build.sh mpi-pi    localhost/mpi-pi:<hash>    Debian bookworm + Open MPI + sshd
#                                  localhost/mpi-pi:latest    + /opt/pi (mpi-pi/pi.c)
#   hack/images/build.sh operator  localhost/mpijob-operator:{<hash>,dev}  the operator (no Docker)
#   hack/images/build.sh all       (pause and mpi-pi: what the real node needs)
# The last stdout line of each build is "<name> <tarball> <reference>...". A second run with the
# same inputs is a cache hit (no work). Needs root (debootstrap, chroot), debootstrap, gcc, and
# Debian's mirror (DEBIAN_MIRROR, default: the one in /etc/apt/sources.list*).
# Load a tarball into containerd: ctr -n k8s.io images import <tarball>; into kind:
#   kind load image-archive <tarball>   (see hack/images/README.md)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CACHE=${IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator/images}
SUITE=${DEBIAN_SUITE:-bookworm}
SSH_PORT=2222
# The image: Open MPI's runtime, sshd/ssh, nslookup; the compilers only in a throw-away builder.
MPI_PACKAGES="openmpi-bin openssh-server openssh-client dnsutils procps iproute2"
BUILDER_PACKAGES="libopenmpi-dev gcc libc6-dev"
PY=$(command -v /usr/bin/python3 || command -v python3)
mkdir -p "$CACHE"
cleanup_dirs=()
trap 'for d in "${cleanup_dirs[@]}"; do rm -rf "$d"; done' EXIT

LOG_TAG=images
source "$here/../lib/common.sh"

# The Debian mirror this machine uses (deb822 .sources or one-line sources.list).
apt_uri() {  # apt_uri <regex for the path>: first matching URI
  { grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}'
    grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      sed -E 's/^deb (\[[^]]*\] )?//' | awk '{print $1}'
  } | grep -E "$1" | head -n 1
}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-$(apt_uri '/debian/?$' || true)}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SECURITY=${DEBIAN_SECURITY:-$(apt_uri '/debian-security/?$' || true)}

hash_of() {  # hash_of <string|file>...: 16 hex digits over the contents of files and literal strings
  local a
  for a in "$@"; do
    if [ -f "$a" ]; then echo "file $(basename "$a")"; cat "$a"; else echo "str $a"; fi
  done | sha256sum | cut -c1-16
}

# A layer tar of a directory: numeric owners, sorted, fixed mtimes for what we add.
tar_layer() {  # tar_layer <dir> <out> [paths...]
  local dir=$1 out=$2; shift 2
  [ $# -gt 0 ] || set -- .
  tar --numeric-owner --sort=name --xattrs --xattrs-include='security.capability' \
    --exclude=./proc/* --exclude=./sys/* --exclude=./dev/* --exclude=./run/* --exclude=./tmp/* \
    -C "$dir" -cf "$out.tmp" "$@"
  mv "$out.tmp" "$out"
}

# Runs a command in a private mount namespace, so that /proc etc. mounted for a chroot vanish
# with it, whatever happens.
in_private_ns() { unshare --mount --propagation private "$@"; }

build_pause() {
  local h out
  h=$(hash_of "$here/pause/pause.c" "$here/oci_pack.py" "$(gcc -dumpfullversion)" v1)
  out=$CACHE/pause-$h.oci.tar
  if [ ! -s "$out" ]; then
    log "pause: building ($out)"
    local w; w=$(mktemp -d "$CACHE/tmp.pause.XXXXXX")
    cleanup_dirs+=("$w")
    mkdir -p "$w/root"
    gcc -Os -static -s -o "$w/root/pause" "$here/pause/pause.c"
    touch -d @0 "$w/root/pause" "$w/root"
    tar_layer "$w/root" "$w/layer.tar" ./pause
    "$PY" "$here/oci_pack.py" --out "$out" --name localhost/pause:local --layer "$w/layer.tar" \
      --config '{"Entrypoint":["/pause"],"User":"65535:65535"}' 2>/dev/null
    rm -rf "$w"
    find "$CACHE" -maxdepth 1 -name 'pause-*.oci.tar' ! -name "$(basename "$out")" -delete
  fi
  echo "pause $out localhost/pause:local"
}

build_mpi_pi() {
  local t0=$SECONDS hb ht base out w
  hb=$(hash_of "$here/mpi-pi/setup-rootfs.sh" "$SUITE" "$DEBIAN_MIRROR" "$DEBIAN_SECURITY" "$MPI_PACKAGES" "$SSH_PORT" v1)
  base=$CACHE/mpi-pi-base-$hb.layer.tar
  ht=$(hash_of "$hb" "$here/mpi-pi/pi.c" "$here/mpi-pi/entrypoint.sh" "$here/oci_pack.py" "$BUILDER_PACKAGES" v1)
  out=$CACHE/mpi-pi-$ht.oci.tar
  if [ -s "$out" ]; then
    echo "mpi-pi $out localhost/mpi-pi:$ht localhost/mpi-pi:latest"
    return 0
  fi
  w=$(mktemp -d "$CACHE/tmp.mpi-pi.XXXXXX")
  cleanup_dirs+=("$w")
  if [ ! -s "$base" ]; then
    command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install -y debootstrap"
    log "mpi-pi: debootstrap $SUITE (minbase) from $DEBIAN_MIRROR"
    in_private_ns debootstrap --variant=minbase "$SUITE" "$w/rootfs" "$DEBIAN_MIRROR" >"$w/debootstrap.log" 2>&1 ||
      { tail -n 30 "$w/debootstrap.log" >&2; die "debootstrap failed"; }
    log "mpi-pi: debootstrap done ($((SECONDS - t0))s); installing $MPI_PACKAGES"
    {
      echo "deb $DEBIAN_MIRROR $SUITE main"
      echo "deb $DEBIAN_MIRROR $SUITE-updates main"
      [ -z "$DEBIAN_SECURITY" ] || echo "deb $DEBIAN_SECURITY $SUITE-security main"
    } >"$w/rootfs/etc/apt/sources.list"
    cp /etc/resolv.conf "$w/rootfs/etc/resolv.conf"
    cp "$here/mpi-pi/setup-rootfs.sh" "$w/rootfs/setup-rootfs.sh"
    in_private_ns sh -c 'mount -t proc proc "$1/proc" && exec chroot "$1" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        PACKAGES="$2" SSH_PORT="$3" sh /setup-rootfs.sh' sh "$w/rootfs" "$MPI_PACKAGES" "$SSH_PORT" \
      >"$w/setup.log" 2>&1 || { tail -n 30 "$w/setup.log" >&2; die "installing packages in the image failed"; }
    tail -n 1 "$w/setup.log" >&2
    rm -f "$w/rootfs/setup-rootfs.sh"
    : >"$w/rootfs/etc/resolv.conf"  # the kubelet bind-mounts the pod's resolv.conf
    echo mpi-pi >"$w/rootfs/etc/hostname"
    rm -rf "$w/rootfs/var/cache/debconf/"*-old "$w/rootfs/var/lib/dpkg/"*-old
    tar_layer "$w/rootfs" "$base"
    log "mpi-pi: base layer $(du -h "$base" | cut -f1) ($((SECONDS - t0))s)"
    rm -rf "$w/rootfs"
  fi
  # Top layer: the pi program, compiled by mpicc in a builder made of the base plus
  # $BUILDER_PACKAGES (so the image itself carries no compiler), then thrown away.
  log "mpi-pi: compiling pi.c in a builder (base + $BUILDER_PACKAGES)"
  mkdir -p "$w/rootfs" "$w/top/opt"
  tar --numeric-owner -C "$w/rootfs" -xf "$base"
  cp /etc/resolv.conf "$w/rootfs/etc/resolv.conf"
  cp "$here/mpi-pi/pi.c" "$w/rootfs/opt/pi.c"
  # (the layer has an empty /dev: the host's is bind-mounted, in the private mount namespace)
  in_private_ns sh -c 'mount -t proc proc "$1/proc" && mount --bind /dev "$1/dev" &&
    exec chroot "$1" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive sh -ec "apt-get -q update && apt-get -q install -y --no-install-recommends $2 &&
      mpicc -O2 -o /opt/pi /opt/pi.c -lm"' sh "$w/rootfs" "$BUILDER_PACKAGES" >"$w/builder.log" 2>&1 ||
    { tail -n 30 "$w/builder.log" >&2; die "compiling pi.c failed"; }
  cp -a "$w/rootfs/opt/pi" "$w/rootfs/opt/pi.c" "$w/top/opt/"
  cp "$here/mpi-pi/entrypoint.sh" "$w/top/entrypoint.sh"
  chmod 755 "$w/top/opt/pi" "$w/top/opt" "$w/top/entrypoint.sh"; chmod 644 "$w/top/opt/pi.c"
  touch -d @0 "$w/top/opt" "$w/top/opt/"* "$w/top/entrypoint.sh"
  tar_layer "$w/top" "$w/top.tar" ./entrypoint.sh ./opt
  "$PY" "$here/oci_pack.py" --out "$out" --name "localhost/mpi-pi:$ht" --name localhost/mpi-pi:latest \
    --layer "$base" --layer "$w/top.tar" \
    --config '{"Entrypoint":["/entrypoint.sh"],"Cmd":["/usr/sbin/sshd","-De","-f","/home/mpiuser/.sshd_config"],"User":"1000:1000","WorkingDir":"/home/mpiuser","Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","LANG=C.UTF-8"],"ExposedPorts":{"2222/tcp":{}}}' 2>/dev/null
  log "mpi-pi: $out ($(du -h "$out" | cut -f1), $((SECONDS - t0))s)"
  rm -rf "$w"
  # Older builds of this image are dead weight in the cache.
  find "$CACHE" -maxdepth 1 \( -name 'mpi-pi-*.oci.tar' ! -name "$(basename "$out")" -o \
    -name 'mpi-pi-base-*.layer.tar' ! -name "$(basename "$base")" \) -delete
  echo "mpi-pi $out localhost/mpi-pi:$ht localhost/mpi-pi:latest"
}

# The operator's own image (the Dockerfile's result, without Docker): a Debian base with Python
# (cached layer), and /opt/venv with the project and its dependencies installed from wheels that
# pip builds on the host (the same Python minor release: 3.11 on bookworm). Runs as 65532, with
# nothing written outside /tmp (the Deployment mounts an emptyDir there; the root is read-only).
OPERATOR_PACKAGES="python3 python3-venv ca-certificates"
build_operator() {
  local t0=$SECONDS hb ht base out w src
  src=$(cd "$here/../.." && pwd)
  hb=$(hash_of "$SUITE" "$DEBIAN_MIRROR" "$DEBIAN_SECURITY" "$OPERATOR_PACKAGES" v1)
  base=$CACHE/operator-base-$hb.layer.tar
  # The project's inputs: its metadata and every module that goes into the wheel.
  ht=$(hash_of "$hb" "$here/oci_pack.py" "$src/pyproject.toml" \
    $(cd "$src" && find client controller informers reconcilers testsupport -name '*.py' | sort | sed "s#^#$src/#") v1)
  out=$CACHE/operator-$ht.oci.tar
  if [ -s "$out" ]; then
    echo "operator $out localhost/mpijob-operator:$ht localhost/mpijob-operator:dev"
    return 0
  fi
  w=$(mktemp -d "$CACHE/tmp.operator.XXXXXX")
  cleanup_dirs+=("$w")
  if [ ! -s "$base" ]; then
    command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install -y debootstrap"
    log "operator: debootstrap $SUITE (minbase) + $OPERATOR_PACKAGES"
    in_private_ns debootstrap --variant=minbase --include="${OPERATOR_PACKAGES// /,}" "$SUITE" "$w/rootfs" \
      "$DEBIAN_MIRROR" >"$w/debootstrap.log" 2>&1 || { tail -n 30 "$w/debootstrap.log" >&2; die "debootstrap failed"; }
    rm -rf "$w/rootfs/var/cache/apt/archives/"*.deb "$w/rootfs/var/lib/apt/lists/"* \
      "$w/rootfs/var/cache/debconf/"*-old "$w/rootfs/var/lib/dpkg/"*-old
    : >"$w/rootfs/etc/resolv.conf"
    tar_layer "$w/rootfs" "$base"
    log "operator: base layer $(du -h "$base" | cut -f1) ($((SECONDS - t0))s)"
    rm -rf "$w/rootfs"
  fi
  log "operator: wheels of the project and its dependencies"
  "${PIP_PYTHON:-$PY}" -m pip wheel -q --wheel-dir "$w/wheels" "$src" >"$w/wheel.log" 2>&1 ||
    { tail -n 30 "$w/wheel.log" >&2; die "building the wheels failed"; }
  mkdir -p "$w/rootfs"
  tar --numeric-owner -C "$w/rootfs" -xf "$base"
  mkdir -p "$w/rootfs/wheels" && cp "$w/wheels/"*.whl "$w/rootfs/wheels/"
  in_private_ns sh -c 'mount -t proc proc "$1/proc" && exec chroot "$1" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
      sh -ec "python3 -m venv /opt/venv && /opt/venv/bin/pip install -q --no-index --find-links=/wheels \
        --no-compile mpijob-operator && python3 -m compileall -q /opt/venv"' sh "$w/rootfs" >"$w/venv.log" 2>&1 ||
    { tail -n 30 "$w/venv.log" >&2; die "installing the operator in the image failed"; }
  mkdir -p "$w/top/opt"
  mv "$w/rootfs/opt/venv" "$w/top/opt/venv"
  find "$w/top" -exec touch -h -d @0 {} +
  tar_layer "$w/top" "$w/top.tar" ./opt
  "$PY" "$here/oci_pack.py" --out "$out" --name "localhost/mpijob-operator:$ht" --name localhost/mpijob-operator:dev \
    --layer "$base" --layer "$w/top.tar" \
    --config '{"Entrypoint":["/opt/venv/bin/mpijob-operator"],"User":"65532:65532","WorkingDir":"/tmp","Env":["PATH=/opt/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin","PYTHONDONTWRITEBYTECODE=1","PYTHONUNBUFFERED=1","HOME=/tmp","LANG=C.UTF-8"],"ExposedPorts":{"8080/tcp":{},"8081/tcp":{}}}' 2>/dev/null
  log "operator: $out ($(du -h "$out" | cut -f1), $((SECONDS - t0))s)"
  rm -rf "$w"
  find "$CACHE" -maxdepth 1 \( -name 'operator-*.oci.tar' ! -name "$(basename "$out")" -o \
    -name 'operator-base-*.layer.tar' ! -name "$(basename "$base")" \) -delete
  echo "operator $out localhost/mpijob-operator:$ht localhost/mpijob-operator:dev"
}

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot)"
case ${1:-all} in
  pause) build_pause ;;
  mpi-pi) build_mpi_pi ;;
  operator) build_operator ;;
  all) build_pause; build_mpi_pi ;;
  *) die "usage: $0 pause|mpi-pi|operator|all" ;;
esac
