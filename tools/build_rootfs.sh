#!/usr/bin/env bash
# tools/build_rootfs.sh [DIR]: builds the default rootfs of sandboxd's
# sandboxes (default DIR: out/rootfs), a minimal Debian 12 root made from
# Debian's packages by mmdebstrap (variant minbase: the Essential packages
# and apt; ~90 packages, about 1 minute and 150 MB here). Built once: a DIR
# holding the stamp file .sandboxd-rootfs is kept as it is. Needs root and
# network access to deb.debian.org (or MIRROR=URL).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${1:-out/rootfs}
stamp=.sandboxd-rootfs
suite=${SUITE:-bookworm}
mirror=${MIRROR:-http://deb.debian.org/debian}

if [ -e "$dir/$stamp" ]; then
  echo "build_rootfs: $dir is built ($(cat "$dir/$stamp"))"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
mkdir -p "$(dirname "$dir")"
tmp="$dir.tmp.$$"
trap '$SUDO rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "build_rootfs: mmdebstrap --variant=minbase $suite $dir ($mirror)"
$SUDO mmdebstrap --quiet --mode=root --variant=minbase \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  "$suite" "$tmp" "$mirror" </dev/null
# Nothing of the host: no host name, no resolver, no machine id.
$SUDO rm -f "$tmp/etc/hostname" "$tmp/etc/resolv.conf" "$tmp/etc/machine-id"
echo "debian $suite minbase, built $(date -u +%Y-%m-%dT%H:%M:%SZ) in" \
  "$(( $(date +%s) - start ))s" | $SUDO tee "$tmp/$stamp" >/dev/null
$SUDO rm -rf "$dir"
$SUDO mv "$tmp" "$dir"
trap - EXIT
echo "build_rootfs: $dir: $(cat "$dir/$stamp"), $($SUDO du -sh "$dir" | cut -f1)"
