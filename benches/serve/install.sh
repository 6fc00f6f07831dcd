#!/usr/bin/env bash
# Installs what the HTTP benchmark runs beside wink serve: wrk (the load generator) and nginx
# (the static server it is compared with), from Debian's packages, when they are missing.
set -euo pipefail
need=()
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
  # The package starts a default nginx on port 80; the benchmark runs its own.
  $sudo systemctl disable --now nginx >/dev/null 2>&1 || $sudo service nginx stop >/dev/null 2>&1 || true
fi
wrk --version 2>&1 | head -1 || true
/usr/sbin/nginx -v
