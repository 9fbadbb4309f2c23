#!/usr/bin/env bash
# Installs the services the integration tests start themselves (a real redis-server),
# Chromium for the HTML report check and promtool (Debian's prometheus) for the alert
# rules. Installs only what is missing; needs root for apt-get.
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)  # promtool checks the generated alert rules
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" != "0" ]; then
  # Not root: the tests that need these services fail with this same hint (in CI they must run).
  echo "ensure_services: WARNING: missing ${missing[*]}; install them with" \
       "'sudo apt-get install ${missing[*]}' before running the integration tests" >&2
  exit 0
fi
echo "ensure_services: installing ${missing[*]} from Debian's packages"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
