#!/usr/bin/env bash
# Runs once, when PostgreSQL starts on an empty data volume: one role and one database for Airflow's
# metadata and another for the planner's store, so neither can touch the other's tables. Passwords
# come from the environment (docker-compose.yml), never from this file.
set -euo pipefail

psql --variable=ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  --set=airflow_password="$AIRFLOW_DB_PASSWORD" \
  --set=planner_password="$PLANNER_DB_PASSWORD" <<'SQL'
CREATE ROLE airflow LOGIN PASSWORD :'airflow_password';
CREATE DATABASE airflow OWNER airflow;
CREATE ROLE pulsar_rebalance LOGIN PASSWORD :'planner_password';
CREATE DATABASE pulsar_rebalance OWNER pulsar_rebalance;
SQL
