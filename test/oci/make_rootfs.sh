#!/usr/bin/env bash
# make_rootfs.sh DIR: a busybox root for the OCI suites: every applet of
# the static busybox, a passwd and group with a user u (1000, group users
# 100), and the usual mount points.
set -eu
dir=$1
busybox=$(command -v busybox)
mkdir -p "$dir"/{bin,etc,proc,dev,sys,tmp,vol,ro,scratch,home/u}
cp "$busybox" "$dir/bin/busybox"
for a in $("$busybox" --list); do
  [ "$a" = busybox ] || ln -sf busybox "$dir/bin/$a"
done
printf 'root:x:0:0:root:/root:/bin/sh\nu:x:1000:100:u:/home/u:/bin/sh\n' >"$dir/etc/passwd"
printf 'root:x:0:\nusers:x:100:\naudio:x:29:\nvideo:x:44:\n' >"$dir/etc/group"
