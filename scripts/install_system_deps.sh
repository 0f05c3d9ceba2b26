#!/usr/bin/env bash
# System packages the integration tests need, from Debian's repositories. Idempotent: installs only
# what is missing, so CI can call it on every run.
#   - PostgreSQL (server binaries; the tests start their own throwaway cluster with initdb/pg_ctl)
#   - Java 17+ and Maven (the local Pulsar cluster is downloaded from Maven Central and runs on the JVM)
#   - Chromium (the review pages' browser tests drive it headless through Playwright)
set -euo pipefail

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
else
    SUDO=(sudo)
fi

missing=()
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    missing+=(postgresql)
fi
java_major() {
    java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1
}
if ! command -v java >/dev/null || [ "$(java_major)" -lt 17 ]; then
    missing+=(openjdk-17-jre-headless)
fi
if ! command -v mvn >/dev/null; then
    missing+=(maven)
fi

if ! command -v chromium >/dev/null; then
    missing+=(chromium)
fi

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install_system_deps: nothing to install"
    exit 0
fi

echo "install_system_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
