#!/usr/bin/env bash
# Builds (or reuses) the appliance images: raw, qcow2, OVA, in ${ZDS_CACHE}/images/current/.
# usage: images/build.sh [--force]     (root; see images/build.py for the steps)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$here/scripts/setup-host.sh"
cd "$here"
exec "$("$here/scripts/venv-path")/bin/python" -m images.build "$@"
