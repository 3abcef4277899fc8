#!/usr/bin/env bash
# The whole test suite on a fresh Debian/Ubuntu machine: installs what it needs, then runs pytest
# under a virtual display (PsychoPy windows). Extra arguments go to pytest, e.g. -m "not slow".
# Two pytest-xdist workers (CUEBENCH_TEST_WORKERS) keep both cores busy; each takes whole modules, and the
# modules that run Ray go to one as one unit (tests/conftest.py: work_unit). The 25 slowest tests are listed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --with-test-tools
export MPLBACKEND=Agg
.venv/bin/python -c "import ray; print(f'cuebench tests: Ray {ray.__version__}')"
exec xvfb-run -a -s "-screen 0 1280x1024x24" .venv/bin/python -m pytest -n "${CUEBENCH_TEST_WORKERS:-2}" --durations=25 "$@"
