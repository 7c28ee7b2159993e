#!/bin/sh
# Creates the read-only role that Grafana's PostgreSQL datasource uses (Grafana runs any
# SQL a dashboard editor types, so it must not connect as the owner of the tables).
# Run once by the postgres image on an empty data directory
# (/docker-entrypoint-initdb.d), as POSTGRES_USER on POSTGRES_DB. The tables are created
# later by `monitor db upgrade` as POSTGRES_USER: the default privileges below make every
# table that role creates in schema public readable by the reader.
set -eu
: "${GRAFANA_READER_USER:?set GRAFANA_READER_USER}"
: "${GRAFANA_READER_PASSWORD:?set GRAFANA_READER_PASSWORD}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v reader="$GRAFANA_READER_USER" -v reader_password="$GRAFANA_READER_PASSWORD" \
  -v owner="$POSTGRES_USER" -v db="$POSTGRES_DB" <<'SQL'
CREATE ROLE :"reader" LOGIN PASSWORD :'reader_password';
GRANT CONNECT ON DATABASE :"db" TO :"reader";
GRANT USAGE ON SCHEMA public TO :"reader";
GRANT SELECT ON ALL TABLES IN SCHEMA public TO :"reader";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public GRANT SELECT ON TABLES TO :"reader";
SQL
