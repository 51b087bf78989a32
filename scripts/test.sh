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

suites=(tests/unit tests/fuzz tests/integration tests/e2e)
[ $# -gt 0 ] && suites=("$@")
timings=$(mktemp)
trap 'rm -f "$timings"' EXIT
echo "== pytest ${suites[*]}"
set +e
ZDS_TEST_TIMINGS=$timings python -m pytest -q --durations=25 "${suites[@]}"
rc=$?
set -e
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
if [ $rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit $rc
