#!/usr/bin/env bash
# The part of the official postgres image's start-up that docker-compose.yml relies on: as root,
# give the data directory to postgres and drop to it; on an empty data directory, initdb with
# POSTGRES_USER and POSTGRES_PASSWORD, password (scram-sha-256) logins from other hosts, listen on
# all addresses, create POSTGRES_DB and run /docker-entrypoint-initdb.d/*.sql|*.sh; then run
# the server in the foreground. A data directory that has been initialised is left as it is.
set -Eeuo pipefail

if [ "${1:0:1}" = '-' ]; then
  set -- postgres "$@"
fi

if [ "$1" = postgres ] && [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  chmod 3777 /var/run/postgresql
  exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
fi

if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_USER:=postgres}"
  : "${POSTGRES_DB:=$POSTGRES_USER}"
  auth=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
  if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != trust ]; then
    echo "error: the database is uninitialized and POSTGRES_PASSWORD is not set" >&2
    echo "  (or set POSTGRES_HOST_AUTH_METHOD=trust to allow logins without one)" >&2
    exit 1
  fi
  pwfile=$(mktemp)
  printf '%s\n' "${POSTGRES_PASSWORD:-}" >"$pwfile"
  pwargs=()
  if [ -n "${POSTGRES_PASSWORD:-}" ]; then
    pwargs=(--pwfile="$pwfile")
  fi
  # shellcheck disable=SC2086  # POSTGRES_INITDB_ARGS is a list of words, as in the official image
  initdb --username="$POSTGRES_USER" "${pwargs[@]}" -D "$PGDATA" --encoding=UTF8 \
    --locale=C.UTF-8 ${POSTGRES_INITDB_ARGS:-} >/dev/null
  rm -f "$pwfile"
  printf "\nlisten_addresses = '*'\n" >>"$PGDATA/postgresql.conf"
  printf '\nhost all all all %s\n' "$auth" >>"$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  export PGUSER="$POSTGRES_USER" PGPASSWORD="${POSTGRES_PASSWORD:-}"
  if [ "$POSTGRES_DB" != postgres ]; then
    psql -v ON_ERROR_STOP=1 -q --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
  fi
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sh) echo "running $f"; . "$f" ;;
      *.sql) echo "running $f"; psql -v ON_ERROR_STOP=1 -q --dbname "$POSTGRES_DB" -f "$f" ;;
      *) ;;
    esac
  done
  unset PGPASSWORD
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  echo "PostgreSQL init process complete; ready for start up."
fi

exec "$@"
