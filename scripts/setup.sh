#!/usr/bin/env bash
# Installs what DeepInfer needs to build and test on a Debian/Ubuntu machine (run as root
# or with sudo available). Only missing packages are installed.
set -euo pipefail
PKGS=(cmake ninja-build g++ make ccache pkg-config libgtest-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
