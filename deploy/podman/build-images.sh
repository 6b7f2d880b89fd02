#!/usr/bin/env bash
# Builds, without any registry, the images that Dockerfile and docker-compose.yml start from,
# then the portal's image (docs/operations.md, "Containers", "Without a registry"):
#
#   localhost/debian:bookworm             debootstrap --variant=minbase, from this machine's apt mirror
#   localhost/python:3.11-slim            Debian's Python 3.11 in a venv on PATH, pip set to this
#                                         machine's package index (what `FROM python:3.11-slim` finds)
#   localhost/postgresql:15-bookworm      Debian's PostgreSQL 15, with the official image's start-up
#   localhost/redis:7.0-bookworm          Debian's Redis 7.0, with the official image's start-up
#   localhost/nginx:1.22-bookworm         Debian's nginx-light (the session proxy)
#   localhost/cardpool:latest             `podman build .` of the unchanged Dockerfile
#
# Nothing about this machine is written into the repository: the mirror and the package index
# are read here, at build time, and go into the images only. An image whose recipe (its
# folder under images/, the mirror, the index, the image below it) is unchanged is kept: podman's own
# storage is the cache. `--refresh` rebuilds them all (e.g. for Debian's security updates).
#
# Needs root, podman (with runc) and debootstrap: apt-get install podman runc debootstrap.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
refresh=false
app=true
for arg in "$@"; do
  case "$arg" in
    --refresh) refresh=true ;;
    --base-only) app=false ;;
    *) echo "usage: $0 [--refresh] [--base-only]" >&2; exit 2 ;;
  esac
done

log() { printf "[build-images %s] %s\n" "$(date -u +%H:%M:%SZ)" "$*"; }

{ read -r mirror; read -r security; } < <(python3 "$here/sources.py" bookworm)
# pip inside the images uses the index this machine's pip uses (only http(s) ones: a file://
# index on this disk is not in the image), else PyPI.
pip_index=${PIP_INDEX_URL:-$(python3 -m pip config get global.index-url 2>/dev/null || true)}
case "$pip_index" in http://* | https://*) ;; *) pip_index="" ;; esac
# ... and trusts what it trusts: the certificate bundle this machine's pip is given, if any.
pip_cert=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
[ -f "$pip_cert" ] || pip_cert=""

recipe_of() {  # recipe_of NAME EXTRA... -> a hash of what the image is built from
  local name=$1
  shift
  { [ -d "$here/images/$name" ] && tar -C "$here/images/$name" -c --sort=name --mtime=@0 --owner=0 --group=0 .; printf '%s\n' "$@"; } | sha256sum | cut -c1-16
}
current() {  # current IMAGE RECIPE -> 0 when IMAGE exists and was built from RECIPE
  [ "$refresh" = false ] && [ "$(podman image inspect --format '{{ index .Labels "io.cardpool.recipe" }}' "$1" 2>/dev/null)" = "$2" ]
}
image_id() { podman image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }
drop_replaced() {  # drop_replaced TAG OLD_ID: remove the image TAG pointed at before (if unused)
  local new
  new=$(image_id "$1")
  if [ -n "$2" ] && [ "$2" != "$new" ]; then podman rmi "$2" >/dev/null 2>&1 || true; fi
}

base=localhost/debian:bookworm
recipe=$(recipe_of debian "$mirror" "$security")
if current "$base" "$recipe"; then
  log "$base is current"
else
  log "debootstrap bookworm from $mirror"
  old=$(image_id "$base")
  work=$(mktemp -d /var/tmp/cardpool-rootfs.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  bash "$here/images/debian/rootfs.sh" "$work/rootfs" "$mirror" "$security"
  tar --numeric-owner -C "$work/rootfs" -c . | podman import \
    --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' \
    --change "LABEL io.cardpool.recipe=$recipe" \
    --change 'LABEL org.opencontainers.image.description="Debian 12 (bookworm) minbase, debootstrapped locally"' \
    - "$base" >/dev/null
  drop_replaced "$base" "$old"
  rm -rf "$work"
  trap - EXIT
  log "built $base"
fi

build() {  # build NAME TAG [EXTRA recipe inputs...]
  local name=$1 tag=$2
  shift 2
  local recipe ctx old
  recipe=$(recipe_of "$name" "$(image_id "$base")" "$@")
  if current "$tag" "$recipe"; then
    log "$tag is current"
    return
  fi
  ctx=$(mktemp -d)
  cp -a "$here/images/$name/." "$ctx/"
  if [ "$name" = python ]; then
    : >"$ctx/pip-ca.pem"
    {
      printf '[global]\n'
      [ -z "$pip_index" ] || printf 'index-url = %s\n' "$pip_index"
      [ -z "$pip_cert" ] || printf 'cert = /etc/pip-ca.pem\n'
    } >"$ctx/pip.conf"
    [ -z "$pip_cert" ] || cp "$pip_cert" "$ctx/pip-ca.pem"
  fi
  log "building $tag"
  old=$(image_id "$tag")
  podman build --quiet --network host --pull=never --build-arg "BASE=$base" \
    --label "io.cardpool.recipe=$recipe" -t "$tag" "$ctx" >/dev/null
  rm -rf "$ctx"
  drop_replaced "$tag" "$old"
  log "built $tag"
}

build python localhost/python:3.11-slim "$pip_index" "$([ -z "$pip_cert" ] || sha256sum <"$pip_cert")"

# The services' images and the portal's depend only on what is built above: build them side by
# side (mostly downloads and unpacking; a minute less on two cores).
services_log=$(mktemp)
{
  build postgresql localhost/postgresql:15-bookworm
  build redis localhost/redis:7.0-bookworm
  build nginx localhost/nginx:1.22-bookworm
} >"$services_log" 2>&1 &
services=$!

if [ "$app" = true ]; then
  log "building localhost/cardpool:latest from $repo/Dockerfile"
  # podman's layer cache reuses every step whose inputs are unchanged.
  old=$(image_id localhost/cardpool:latest)
  podman build --quiet --network host --pull=never -t localhost/cardpool:latest "$repo" >/dev/null
  drop_replaced localhost/cardpool:latest "$old"
  log "built localhost/cardpool:latest ($(podman image inspect --format '{{.Size}}' localhost/cardpool:latest) bytes)"
fi
status=0
wait "$services" || status=$?
cat "$services_log"
rm -f "$services_log"
exit "$status"
