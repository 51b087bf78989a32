#!/usr/bin/env bash
# The test command (README, CI): lint, type-check, then unit, integration and e2e tests.
# Fails on pytest's "no tests collected" (exit 5) as on any other failure. Prints at its
# end how long each phase took (lint, each pytest suite, each e2e module).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
start=$SECONDS
bash scripts/setup-host.sh
venv=$(scripts/venv-path)
export PATH="$venv/bin:$PATH"
phases=()
phase() {  # phase NAME COMMAND...: runs it and records its seconds
  local name=$1 t0=$SECONDS
  shift
  echo "== $name"
  "$@"
  phases+=("$(printf '%-46s %8d s' "$name" $((SECONDS - t0)))")
}
phases+=("$(printf '%-46s %8d s' "setup (host packages, venv)" $((SECONDS - start)))")
phase ruff ruff check appliance api tests images bench
phase mypy mypy
if [ -x scripts/lint-ansible.sh ]; then phase ansible bash scripts/lint-ansible.sh; fi

timings=$(mktemp)
trap 'rm -f "$timings"' EXIT
rc=0
pytest_phase() {  # pytest_phase NAME PYTEST-ARGS...: its failure fails the run, at the end
  local name=$1 t0=$SECONDS code
  shift
  echo "== $name"
  set +e
  python -m pytest -q "$@"
  code=$?
  set -e
  phases+=("$(printf '%-46s %8d s' "$name" $((SECONDS - t0)))")
  if [ $code -eq 5 ]; then echo "pytest collected no tests ($name): failing" >&2; code=1; fi
  if [ $rc -eq 0 ]; then rc=$code; fi
}
if [ $# -gt 0 ]; then
  ZDS_TEST_TIMINGS=$timings pytest_phase "pytest $*" --durations=25 "$@"
else
  # unit and fuzz tests need no daemon and share nothing: one worker per core (issue 26:
  # 280 s in one process, about 150 s in two). Integration and e2e stay in one process:
  # they own host ports, daemons and the session appliance.
  pytest_phase "pytest unit + fuzz ($(nproc) workers)" -n "$(nproc)" --durations=10 \
    tests/unit tests/fuzz
  ZDS_TEST_TIMINGS=$timings pytest_phase "pytest integration + e2e" --durations=25 \
    tests/integration tests/e2e
fi
echo "== time per phase"
printf '%s\n' "${phases[@]}"
if [ -s "$timings" ]; then
  python - "$timings" <<'PY'
import json, sys
for key, seconds in json.load(open(sys.argv[1])).items():
    print(f"{'    ' if '/' in key else ''}pytest {key:<{39 if '/' in key else 39}} {seconds:8.0f} s")
PY
fi
printf '%-46s %8d s\n' "total" $((SECONDS - start))
exit $rc
