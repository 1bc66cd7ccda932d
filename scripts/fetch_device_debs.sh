#!/usr/bin/env bash
# Downloads (here, where apt works) the Debian packages a device build needs beyond the device
# image: PCRE2 and utf8proc with their headers. scripts/device_run.sh unpacks them there into a
# private prefix. The folder .debs/ is git-ignored and travels with `carry: [".debs"]`.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .debs && cd .debs
apt-get download libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2
