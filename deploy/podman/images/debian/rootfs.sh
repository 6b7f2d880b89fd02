#!/usr/bin/env bash
# rootfs.sh DIR MIRROR [SECURITY_MIRROR]: a Debian 12 (bookworm) minbase root file system in DIR
# for `podman import` (deploy/podman/build-images.sh): debootstrap from MIRROR, apt sources as
# Debian's own container images have them (bookworm, -updates, -security), no services started
# by package scripts, no package lists or caches kept.
set -euo pipefail
root=$1 mirror=$2 security=${3:-}
log=$(mktemp)
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$log" 2>&1 \
  || { tail -20 "$log"; rm -f "$log"; exit 1; }
rm -f "$log" "$root/etc/apt/sources.list"
{
  printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\n' "$mirror"
  printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
  if [ -n "$security" ]; then
    printf '\nTypes: deb\nURIs: %s\nSuites: bookworm-security\nComponents: main\n' "$security"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
  fi
} >"$root/etc/apt/sources.list.d/debian.sources"
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
  >"$root/etc/apt/apt.conf.d/90container"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
  "$root"/var/cache/apt/archives/*.deb "$root"/var/log/*.log
