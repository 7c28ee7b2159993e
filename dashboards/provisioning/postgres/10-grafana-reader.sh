#!/bin/sh
# Creates the read-only role that Grafana's PostgreSQL datasource uses (Grafana runs any
# SQL a dashboard editor types, so it must not connect as the owner of the tables, nor read
# users' raw data). Run once by the postgres image on an empty data directory
# (/docker-entrypoint-initdb.d), as POSTGRES_USER on POSTGRES_DB.
#
# The reader sees only the schema monitor_reader: `monitor db upgrade` (run later as
# POSTGRES_USER) fills it with one view per results table, leaving out raw payloads, detector
# state and calibration data. The default privileges below make every view that role creates
# there readable by the reader; the reader's search_path makes dashboards' unqualified table
# names resolve to those views. The reader has no privilege on the tables in public.
set -eu
: "${GRAFANA_READER_USER:?set GRAFANA_READER_USER}"
: "${GRAFANA_READER_PASSWORD:?set GRAFANA_READER_PASSWORD}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v reader="$GRAFANA_READER_USER" -v reader_password="$GRAFANA_READER_PASSWORD" \
  -v owner="$POSTGRES_USER" -v db="$POSTGRES_DB" <<'SQL'
CREATE ROLE :"reader" LOGIN PASSWORD :'reader_password';
GRANT CONNECT ON DATABASE :"db" TO :"reader";
REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT USAGE, CREATE ON SCHEMA public TO :"owner";
CREATE SCHEMA IF NOT EXISTS monitor_reader AUTHORIZATION :"owner";
GRANT USAGE ON SCHEMA monitor_reader TO :"reader";
GRANT SELECT ON ALL TABLES IN SCHEMA monitor_reader TO :"reader";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA monitor_reader GRANT SELECT ON TABLES TO :"reader";
ALTER ROLE :"reader" SET search_path = monitor_reader;
ALTER ROLE :"reader" SET default_transaction_read_only = on;
SQL
