#!/usr/bin/env bash
# Generate the secrets docker-compose.yml requires into .env beside it (created with mode 600). Secrets
# already in .env are kept, so running it again changes nothing; PostgreSQL sets its passwords when it
# first creates its volume, so generate them before the first `docker compose up`.
set -euo pipefail
cd "$(dirname "$0")/.."
umask 077
touch .env
python3 - .env <<'PY'
import base64
import re
import secrets
import sys

path = sys.argv[1]
with open(path) as handle:
    present = {match.group(1) for match in re.finditer(r"^([A-Z_]+)=", handle.read(), re.MULTILINE)}
wanted = {
    "POSTGRES_PASSWORD": lambda: secrets.token_urlsafe(24),
    "AIRFLOW_DB_PASSWORD": lambda: secrets.token_urlsafe(24),
    "PLANNER_DB_PASSWORD": lambda: secrets.token_urlsafe(24),
    "AIRFLOW_ADMIN_PASSWORD": lambda: secrets.token_urlsafe(18),
    "AIRFLOW_JWT_SECRET": lambda: secrets.token_urlsafe(48),
    # Fernet: URL-safe base64 of 32 random bytes.
    "AIRFLOW_FERNET_KEY": lambda: base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
}
added = [name for name in wanted if name not in present]
with open(path, "a") as handle:
    for name in added:
        handle.write(f"{name}={wanted[name]()}\n")
print(f"compose-secrets: {len(added)} generated into {path}" + (f" ({', '.join(added)})" if added else ""))
PY
