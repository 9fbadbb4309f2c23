#!/usr/bin/env bash
# Installs the services the integration tests start themselves (a real redis-server),
# Chromium for the HTML report check and Debian's prometheus (promtool for the alert rules,
# the server for the rollout tests). Installs only what is missing; needs root for apt-get.
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# promtool checks the generated alert rules; the server beside it scrapes `infertune serve`
# in the rollout tests (both in Debian's prometheus package)
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  missing+=(prometheus)
fi
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
