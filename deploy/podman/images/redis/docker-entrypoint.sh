#!/usr/bin/env bash
# The official redis image's start-up: arguments that start with `-` (or a .conf file) go to
# redis-server; as root, give /data to redis and drop to it; protected mode off, as the official
# image builds it (the container's network is the boundary: clients come from other containers).
set -euo pipefail

if [ "${1:0:1}" = '-' ] || [ "${1%.conf}" != "$1" ]; then
  set -- redis-server "$@"
fi

if [ "$1" = redis-server ] && [ "$(id -u)" = 0 ]; then
  find . \! -user redis -exec chown redis '{}' +
  exec setpriv --reuid=redis --regid=redis --init-groups "${BASH_SOURCE[0]}" "$@"
fi

if [ "$1" = redis-server ]; then
  case " $* " in
    *" --protected-mode "*) ;;
    *) set -- "$@" --protected-mode no ;;
  esac
  umask 0077
fi

exec "$@"
