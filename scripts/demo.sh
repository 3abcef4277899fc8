#!/usr/bin/env bash
# The main job on the embedded default: installs cuebench into .venv, then runs `cuebench demo`.
# Extra arguments go to the demo, e.g. --out demo-output or --serve.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/cuebench demo "$@"
