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
# same inputs is a cache hit (no work). Every Debian image starts from its suite's minbase rootfs,
# debootstrapped once per suite and cached (debootstrap-<suite>-<hash>.tar); its packages come
# with apt-get in a chroot. Needs root (debootstrap, chroot), debootstrap, gcc, and
# Debian's mirror (DEBIAN_MIRROR, default: the one in /etc/apt/sources.list*).
# Load a tarball into containerd: ctr -n k8s.io images import <tarball>; into kind:
#   kind load image-archive <tarball>   (see hack/images/README.md)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CACHE=${IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator/images}
SUITE=${DEBIAN_SUITE:-bookworm}
SSH_PORT=2222
PY=$(command -v /usr/bin/python3 || command -v python3)
mkdir -p "$CACHE"
cleanup_dirs=()
trap 'for d in "${cleanup_dirs[@]}"; do rm -rf "$d"; done' EXIT

LOG_TAG=images
source "$here/../lib/common.sh"

# Each image, and each suite's minbase, under a lock of its own (build_lock): the real node's images
# (`all`, which make cluster-up builds) never wait for the other flavours (`mpis`, which make test
# starts beside the cluster's builds: testsupport/builds.py), and one build never runs twice at once.
# (`if`, not `||`: a function called on the right of `||` runs without set -e.)
locked() {  # locked <lock name> <command>...
  local fd
  build_lock "images-$1" fd
  shift
  "$@"
  build_unlock "$fd"
}

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

need_debootstrap() {  # as hack/realnode/up.sh does: Debian's package, installed when missing
  command -v debootstrap >/dev/null && return 0
  command -v apt-get >/dev/null || die "debootstrap is missing (and there is no apt-get to install it)"
  log "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null; } ||
    die "apt-get install debootstrap failed"
}

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
# in_chroot <rootfs> <command>...: runs it in the rootfs with /proc and the host's /dev (the
# layers have an empty /dev), both gone with the private mount namespace.
in_chroot() {
  # shellcheck disable=SC2016 # expanded by sh, not here
  in_private_ns sh -c 'mount -t proc proc "$1/proc" && mount --bind /dev "$1/dev" && r=$1 && shift &&
    exec chroot "$r" "$@"' sh "$@"
}

# The minbase rootfs of a Debian suite, debootstrapped once (by the first build that needs it,
# under its own lock, `locked`) and shared by every image of that suite: five debootstraps of the same
# ~100 packages were minutes of a cold run (issue 44). Its apt sources include -updates and
# -security; the downloaded .debs and package lists are left out (apt-get update fetches them).
minbase_tar() {  # minbase_tar <suite>: the cached tarball's path (may not exist yet)
  echo "$CACHE/debootstrap-$1-$(hash_of "$1" "$DEBIAN_MIRROR" "$DEBIAN_SECURITY" v1).tar"
}
make_minbase() {  # make_minbase <suite> <tarball>: unless the lock's previous holder made it
  local suite=$1 out=$2 w t0=$SECONDS
  if [ -s "$out" ]; then return 0; fi
  need_debootstrap
  w=$(mktemp -d "$CACHE/tmp.debootstrap.XXXXXX")
  cleanup_dirs+=("$w")
  log "debootstrap $suite (minbase) from $DEBIAN_MIRROR"
  in_private_ns debootstrap --variant=minbase "$suite" "$w/rootfs" "$DEBIAN_MIRROR" >"$w/debootstrap.log" 2>&1 ||
    { tail -n 30 "$w/debootstrap.log" >&2; die "debootstrap failed"; }
  {
    echo "deb $DEBIAN_MIRROR $suite main"
    echo "deb $DEBIAN_MIRROR $suite-updates main"
    [ -z "$DEBIAN_SECURITY" ] || echo "deb $DEBIAN_SECURITY $suite-security main"
  } >"$w/rootfs/etc/apt/sources.list"
  : >"$w/rootfs/etc/resolv.conf"
  rm -rf "$w/rootfs/var/cache/apt/archives/"*.deb "$w/rootfs/var/lib/apt/lists/"*
  tar_layer "$w/rootfs" "$out"
  rm -rf "$w"
  log "debootstrap $suite: $(du -h "$out" | cut -f1) ($((SECONDS - t0))s)"
  find "$CACHE" -maxdepth 1 -name "debootstrap-$suite-*.tar" ! -name "$(basename "$out")" -delete
}
unpack_minbase() {  # unpack_minbase <suite> <dir>: the suite's minbase rootfs, with the host's resolv.conf
  local tarball; tarball=$(minbase_tar "$1")
  if [ ! -s "$tarball" ]; then locked "debootstrap-$1" make_minbase "$1" "$tarball"; fi
  mkdir -p "$2"
  tar --numeric-owner --xattrs --xattrs-include='security.capability' -C "$2" -xf "$tarball"
  cp /etc/resolv.conf "$2/etc/resolv.conf"
}

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

# The MPI images: one per MPI flavour, each with the same sshd/ssh setup (mpi-pi/setup-rootfs.sh),
# entrypoint (mpi-pi/entrypoint.sh) and pi program (mpi-pi/pi.c) compiled against its MPI.
#   flavour   suite     MPI                                        references
#   openmpi4  bookworm  Open MPI 4.1 (ORTE)                        localhost/mpi-pi:{<hash>,latest,openmpi4}
#   openmpi5  trixie    Open MPI 5.0 (PRRTE) + python3-mpi4py      localhost/mpi-pi:{openmpi5-<hash>,openmpi5}
#   mpich     trixie    MPICH 4.2 (Hydra)                          localhost/mpi-pi:{mpich-<hash>,mpich}
#   intel     bookworm  Intel MPI (Hydra) from PyPI's impi-rt wheel localhost/mpi-pi:{intel-<hash>,intel}
MPI_FLAVOURS="openmpi4 openmpi5 mpich intel"
IMPI_VERSION=2021.16.1  # the last impi-rt that bundles libfabric (later ones need a libfabric wheel)
COMMON_PACKAGES="openssh-server openssh-client dnsutils procps iproute2"
flavour_vars() {  # sets suite, packages, builder, refs for flavour $1
  suite=$SUITE builder="gcc libc6-dev"
  case $1 in
    openmpi4) packages="openmpi-bin" builder="libopenmpi-dev $builder" ;;
    openmpi5) suite=${DEBIAN_SUITE_NEW:-trixie} packages="openmpi-bin python3-mpi4py"
      builder="libopenmpi-dev $builder" ;;
    mpich) suite=${DEBIAN_SUITE_NEW:-trixie} packages="mpich" builder="libmpich-dev $builder" ;;
    intel) packages="" ;;  # the MPI comes from the impi-rt wheel (intel_install)
    *) die "unknown MPI flavour $1 (one of: $MPI_FLAVOURS)" ;;
  esac
  packages="$packages $COMMON_PACKAGES"
}
flavour_refs() {  # flavour_refs <flavour> <hash>: the image's references, the first one unique to its inputs
  if [ "$1" = openmpi4 ]; then echo "localhost/mpi-pi:$2 localhost/mpi-pi:latest localhost/mpi-pi:openmpi4"
  else echo "localhost/mpi-pi:$1-$2 localhost/mpi-pi:$1"; fi
}
flavour_env() {  # extra image Env (JSON list items) of flavour $1
  case $1 in
    intel) echo '"PATH=/opt/intel/mpi/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","I_MPI_ROOT=/opt/intel/mpi","FI_PROVIDER_PATH=/opt/intel/mpi/lib",' ;;
    *) echo '"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",' ;;
  esac
}

# Intel MPI from PyPI's wheels (downloaded once by pip into the cache, pinned): the wheel's data
# directory is the install prefix; it goes to /opt/intel/mpi without the benchmarks, the tuner and
# Java, and the wheel's copies of one library under several names become symlinks.
intel_wheel() {  # intel_wheel <impi-rt|impi-devel>: the cached wheel's path
  local d=$CACHE/wheels f
  f=$(ls "$d/${1//-/_}-$IMPI_VERSION-"*.whl 2>/dev/null | head -n 1)
  if [ -z "$f" ]; then
    mkdir -p "$d"
    "$PY" -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
      --python-version 3 -d "$d" "$1==$IMPI_VERSION" >&2 || die "pip download $1==$IMPI_VERSION failed"
    f=$(ls "$d/${1//-/_}-$IMPI_VERSION-"*.whl | head -n 1)
  fi
  echo "$f"
}
intel_install() {  # intel_install <wheel> <prefix>
  "$PY" - "$1" "$2" <<'PYEOF'
import hashlib, os, sys, zipfile
whl, prefix = sys.argv[1], sys.argv[2]
skip = ("bin/IMB-", "bin/mpitune", "opt/mpi/tune_fast/", "share/java/", "lib/libmpijava", "etc/conda/")
with zipfile.ZipFile(whl) as z:
    for info in z.infolist():
        parts = info.filename.split("/", 2)
        if len(parts) < 3 or not parts[0].endswith(".data") or parts[1] != "data" or info.is_dir():
            continue
        rel = parts[2]
        if rel.startswith(skip):
            continue
        dest = os.path.join(prefix, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with z.open(info) as src, open(dest, "wb") as out:
            out.write(src.read())
        os.chmod(dest, 0o755 if (info.external_attr >> 16) & 0o111 else 0o644)
lib = os.path.join(prefix, "lib")
groups = {}
for name in sorted(os.listdir(lib)) if os.path.isdir(lib) else []:
    path = os.path.join(lib, name)
    if os.path.isfile(path) and not os.path.islink(path):
        with open(path, "rb") as f:
            groups.setdefault(hashlib.sha256(f.read()).hexdigest(), []).append(name)
for names in groups.values():
    keep = max(names, key=len)  # libmpi.so.12.0.0 stays; libmpi.so, .so.12, .so.12.0 point at it
    for name in names:
        if name != keep and name.startswith(keep.split(".so")[0] + ".so"):
            os.remove(os.path.join(lib, name))
            os.symlink(keep, os.path.join(lib, name))
PYEOF
}

# make_mpi_base <flavour> <suite> <packages> <impi-rt wheel or ""> <rootfs dir> <layer>: the suite's
# minbase + the flavour's packages, set up by mpi-pi/setup-rootfs.sh, as the image's base layer.
make_mpi_base() {
  local flavour=$1 suite=$2 packages=$3 rt=$4 root=$5 base=$6 t0=$SECONDS
  unpack_minbase "$suite" "$root"
  log "mpi-pi-$flavour: installing $packages"
  if [ -n "$rt" ]; then
    intel_install "$rt" "$root/opt/intel/mpi"
    echo /opt/intel/mpi/lib >"$root/etc/ld.so.conf.d/intel-mpi.conf"
  fi
  cp "$here/mpi-pi/setup-rootfs.sh" "$root/setup-rootfs.sh"
  in_chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin PACKAGES="$packages" SSH_PORT="$SSH_PORT" \
    sh /setup-rootfs.sh >"$root.setup.log" 2>&1 ||
    { tail -n 30 "$root.setup.log" >&2; die "installing packages in the image failed"; }
  tail -n 1 "$root.setup.log" >&2
  rm -f "$root/setup-rootfs.sh"
  : >"$root/etc/resolv.conf"  # the kubelet bind-mounts the pod's resolv.conf
  echo mpi-pi >"$root/etc/hostname"
  rm -rf "$root/var/cache/debconf/"*-old "$root/var/lib/dpkg/"*-old
  tar_layer "$root" "$base"
  log "mpi-pi-$flavour: base layer $(du -h "$base" | cut -f1) ($((SECONDS - t0))s)"
  rm -rf "$root"
}

build_mpi_pi() {  # build_mpi_pi <flavour>
  local flavour=$1 t0=$SECONDS hb ht base out w suite packages builder refs rt="" devel="" extra=""
  flavour_vars "$flavour"
  if [ "$flavour" = intel ]; then
    rt=$(intel_wheel impi-rt) devel=$(intel_wheel impi-devel)
    extra="$(basename "$rt") $(basename "$devel")"
  fi
  hb=$(hash_of "$here/mpi-pi/setup-rootfs.sh" "$(basename "$(minbase_tar "$suite")")" "$packages" "$SSH_PORT" "$extra" v3)
  base=$CACHE/mpi-pi-$flavour-base-$hb.layer.tar
  ht=$(hash_of "$hb" "$here/mpi-pi/pi.c" "$here/mpi-pi/entrypoint.sh" "$here/oci_pack.py" "$builder" "$(flavour_env "$flavour")" v2)
  out=$CACHE/mpi-pi-$flavour-$ht.oci.tar
  refs=$(flavour_refs "$flavour" "$ht")
  if [ -s "$out" ]; then
    echo "mpi-pi-$flavour $out $refs"
    return 0
  fi
  w=$(mktemp -d "$CACHE/tmp.mpi-pi.XXXXXX")
  cleanup_dirs+=("$w")
  if [ ! -s "$base" ]; then make_mpi_base "$flavour" "$suite" "$packages" "$rt" "$w/rootfs" "$base"; fi
  # Top layer: the pi program, compiled by mpicc in a builder made of the base plus $builder
  # (so the image itself carries no compiler), then thrown away.
  log "mpi-pi-$flavour: compiling pi.c in a builder (base + $builder)"
  mkdir -p "$w/rootfs" "$w/top/opt"
  tar --numeric-owner -C "$w/rootfs" -xf "$base"
  cp /etc/resolv.conf "$w/rootfs/etc/resolv.conf"
  cp "$here/mpi-pi/pi.c" "$w/rootfs/opt/pi.c"
  local mpicc=mpicc
  if [ -n "$devel" ]; then
    intel_install "$devel" "$w/rootfs/opt/intel/mpi"
    mpicc="I_MPI_ROOT=/opt/intel/mpi /opt/intel/mpi/bin/mpicc"
  fi
  # (HOME: Open MPI 5's mpicc fails in opal_init without one)
  in_chroot "$w/rootfs" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root DEBIAN_FRONTEND=noninteractive \
    sh -ec "apt-get -q update && apt-get -q install -y --no-install-recommends $builder &&
      $mpicc -O2 -o /opt/pi /opt/pi.c -lm" >"$w/builder.log" 2>&1 ||
    { tail -n 30 "$w/builder.log" >&2; die "compiling pi.c failed"; }
  cp -a "$w/rootfs/opt/pi" "$w/rootfs/opt/pi.c" "$w/top/opt/"
  cp "$here/mpi-pi/entrypoint.sh" "$w/top/entrypoint.sh"
  chmod 755 "$w/top/opt/pi" "$w/top/opt" "$w/top/entrypoint.sh"; chmod 644 "$w/top/opt/pi.c"
  touch -d @0 "$w/top/opt" "$w/top/opt/"* "$w/top/entrypoint.sh"
  tar_layer "$w/top" "$w/top.tar" ./entrypoint.sh ./opt
  local names=() r
  for r in $refs; do names+=(--name "$r"); done
  "$PY" "$here/oci_pack.py" --out "$out" "${names[@]}" --layer "$base" --layer "$w/top.tar" \
    --config '{"Entrypoint":["/entrypoint.sh"],"Cmd":["/usr/sbin/sshd","-De","-f","/home/mpiuser/.sshd_config"],"User":"1000:1000","WorkingDir":"/home/mpiuser","Env":['"$(flavour_env "$flavour")"'"LANG=C.UTF-8"],"ExposedPorts":{"2222/tcp":{}}}' 2>/dev/null
  log "mpi-pi-$flavour: $out ($(du -h "$out" | cut -f1), $((SECONDS - t0))s)"
  rm -rf "$w"
  # Older builds of this image are dead weight in the cache. (Those named before flavours,
  # mpi-pi-<hash>.oci.tar and mpi-pi-base-*, are left alone: a checkout of an older version may
  # still use them.)
  find "$CACHE" -maxdepth 1 \( -name "mpi-pi-$flavour-*.oci.tar" ! -name "$(basename "$out")" -o \
    -name "mpi-pi-$flavour-base-*.layer.tar" ! -name "$(basename "$base")" \) -delete
  echo "mpi-pi-$flavour $out $refs"
}

# The operator's own image (the Dockerfile's result, without Docker): a Debian base with Python
# (cached layer), and /opt/venv with the project and its dependencies installed from wheels that
# pip builds on the host (the same Python minor release: 3.11 on bookworm). Runs as 65532, with
# nothing written outside /tmp (the Deployment mounts an emptyDir there; the root is read-only).
OPERATOR_PACKAGES="python3 python3-venv ca-certificates"
make_operator_base() {  # make_operator_base <rootfs dir> <layer>: bookworm's minbase + OPERATOR_PACKAGES
  local root=$1 base=$2 t0=$SECONDS
  unpack_minbase "$SUITE" "$root"
  log "operator: installing $OPERATOR_PACKAGES"
  # (as mpi-pi/setup-rootfs.sh: no daemons start in the chroot; no package lists or .debs kept)
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" && chmod 755 "$root/usr/sbin/policy-rc.d"
  in_chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LC_ALL=C \
    sh -ec "apt-get -q update && apt-get -q install -y --no-install-recommends $OPERATOR_PACKAGES && apt-get clean" \
    >"$root.apt.log" 2>&1 || { tail -n 30 "$root.apt.log" >&2; die "installing $OPERATOR_PACKAGES failed"; }
  rm -rf "$root/usr/sbin/policy-rc.d" "$root/var/lib/apt/lists/"* "$root/var/log/apt" \
    "$root/var/cache/debconf/"*-old "$root/var/lib/dpkg/"*-old
  : >"$root/etc/resolv.conf"
  tar_layer "$root" "$base"
  log "operator: base layer $(du -h "$base" | cut -f1) ($((SECONDS - t0))s)"
  rm -rf "$root"
}
build_operator() {
  local t0=$SECONDS hb ht base out w src
  src=$(cd "$here/../.." && pwd)
  hb=$(hash_of "$(basename "$(minbase_tar "$SUITE")")" "$OPERATOR_PACKAGES" v2)
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
  if [ ! -s "$base" ]; then make_operator_base "$w/rootfs" "$base"; fi
  log "operator: wheels of the project and its dependencies"
  "${PIP_PYTHON:-$PY}" -m pip wheel -q --wheel-dir "$w/wheels" "$src" >"$w/wheel.log" 2>&1 ||
    { tail -n 30 "$w/wheel.log" >&2; die "building the wheels failed"; }
  mkdir -p "$w/rootfs"
  tar --numeric-owner -C "$w/rootfs" -xf "$base"
  mkdir -p "$w/rootfs/wheels" && cp "$w/wheels/"*.whl "$w/rootfs/wheels/"
  in_chroot "$w/rootfs" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    sh -ec "python3 -m venv /opt/venv && /opt/venv/bin/pip install -q --no-index --find-links=/wheels \
      --no-compile mpijob-operator && python3 -m compileall -q /opt/venv" >"$w/venv.log" 2>&1 ||
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
  pause) locked pause build_pause ;;
  mpi-pi | openmpi4) locked mpi-pi-openmpi4 build_mpi_pi openmpi4 ;;
  openmpi5 | mpich | intel) locked "mpi-pi-$1" build_mpi_pi "$1" ;;
  # openmpi4 last: make cluster-up builds it (`all`) beside its Go builds, and make test's background
  # `mpis` (nice 19) starts beside them too; taking its lock first would make the real node wait.
  mpis) for f in $MPI_FLAVOURS; do [ "$f" = openmpi4 ] || locked "mpi-pi-$f" build_mpi_pi "$f"; done
    locked mpi-pi-openmpi4 build_mpi_pi openmpi4 ;;
  operator) locked operator build_operator ;;
  all) locked pause build_pause; locked mpi-pi-openmpi4 build_mpi_pi openmpi4 ;;
  *) die "usage: $0 pause|mpi-pi|openmpi4|openmpi5|mpich|intel|mpis|operator|all" ;;
esac
