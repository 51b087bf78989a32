#!/usr/bin/env bash
# The test command (README, CI): lint, type-check, then unit, integration and e2e tests.
# Fails on pytest's "no tests collected" (exit 5) as on any other failure.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bash scripts/setup-host.sh
venv=$(scripts/venv-path)
export PATH="$venv/bin:$PATH"

echo "== ruff"; ruff check appliance api tests images bench
echo "== mypy"; mypy
if [ -x scripts/lint-ansible.sh ]; then echo "== ansible"; bash scripts/lint-ansible.sh; fi

suites=(tests/unit tests/fuzz tests/integration tests/e2e)
[ $# -gt 0 ] && suites=("$@")
echo "== pytest ${suites[*]}"
set +e
python -m pytest -q --durations=25 "${suites[@]}"
rc=$?
set -e
if [ $rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit $rc
