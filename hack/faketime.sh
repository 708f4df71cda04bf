#!/usr/bin/env bash
# libfaketime, which e2e/test_verdict.py's clock-skew test preloads into the operator to run its
# clock 5 s behind the API server's: Debian's libfaketime package, fetched with `apt-get download`
# and unpacked into the cache (no root needed, nothing installed system-wide), once. `make test`,
# `make e2e` and `make e2e-mpis` run this first, so a fresh machine needs no step of its own.
# Prints the library's path on the last line of stdout; e2e/test_verdict.py finds it there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
LOG_TAG=faketime
# shellcheck source=hack/lib/common.sh
source "$here/lib/common.sh"
build_lock libfaketime
cache=${MPIJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator}
dir=$cache/libfaketime
lib=$dir/libfaketime.so.1
if [ ! -f "$lib" ]; then
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
    die "libfaketime is taken from Debian's package (apt-get download): this machine has no apt-get/dpkg-deb"
  tmp=$(mktemp -d "$cache/libfaketime.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # apt-get download needs the package lists; a fresh container may have none yet (root refreshes them).
  if ! (cd "$tmp" && apt-get download -q libfaketime >/dev/null 2>"$tmp/err"); then
    [ "$(id -u)" = 0 ] || die "apt-get download libfaketime failed ($(tail -1 "$tmp/err")): run apt-get update as root"
    log "apt-get download libfaketime failed ($(tail -1 "$tmp/err")): apt-get update, then again"
    apt-get update -qq
    (cd "$tmp" && apt-get download -q libfaketime >/dev/null 2>"$tmp/err") ||
      die "apt-get download libfaketime failed: $(tail -1 "$tmp/err")"
  fi
  dpkg-deb -x "$tmp"/libfaketime_*.deb "$tmp/root"
  found=$(find "$tmp/root" -name libfaketime.so.1 -path '*/faketime/*' | head -1)
  [ -n "$found" ] || die "no libfaketime.so.1 in $(basename "$tmp"/libfaketime_*.deb)"
  mkdir -p "$tmp/lib"
  cp "$found" "$tmp/lib/libfaketime.so.1"
  basename "$tmp"/libfaketime_*.deb >"$tmp/lib/package"
  rm -rf "$dir" && mv "$tmp/lib" "$dir"
  log "$(cat "$dir/package") unpacked into $dir"
fi
echo "$lib"
