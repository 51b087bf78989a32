#!/usr/bin/env bash
# Installs what a Debian 12 host needs to test, build and run ZDS: apt packages (the host's
# own tools: clients, daemons for integration tests, image build, QEMU) and the Python venv.
# The appliance's OS packages are NOT listed here: ansible/roles are their single source.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${ZDS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zds}
mkdir -p "$cache"

host_packages=(
  # clients the tests use against the appliance
  libnfs-utils libiscsi-bin curl jq openssl
  # qemu-io/qemu-img with libiscsi: write and read LUN blocks from the host in e2e tests
  qemu-block-extra
  # real nfs-ganesha on the host for integration tests
  nfs-ganesha nfs-ganesha-vfs rpcbind dbus iproute2
  # probes
  fio iperf3
  # the web console's browser tests (selenium drives Debian's headless Chromium)
  chromium chromium-driver
  # image build and boot
  mmdebstrap qemu-system-x86 qemu-utils ovmf dosfstools mtools fdisk e2fsprogs
  systemd-boot-efi zstd
  # python
  python3-venv
  # Vagrantfile check
  vagrant
)

need=()
for p in "${host_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing host packages: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # policy-rc.d keeps Debian from starting ganesha/rpcbind on the host: tests start their own.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

venv=$("$here/scripts/venv-path")
py=${ZDS_PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
stamp="$venv/.zds-deps-$(sha256sum "$here/pyproject.toml" | cut -c1-16)"
if [ ! -e "$stamp" ]; then
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q -e "$here[dev]"
  touch "$stamp"
elif [ "$("$venv/bin/python" -c 'import appliance; print(appliance.__file__)' 2>/dev/null)" \
       != "$here/appliance/__init__.py" ]; then
  # the venv is shared: re-point its editable install at this checkout (CI clones anew);
  # setuptools' build warnings go to a log, shown only if pip fails
  if ! "$venv/bin/pip" install -q --no-deps -e "$here" >"$cache/pip-repoint.log" 2>&1; then
    cat "$cache/pip-repoint.log" >&2; exit 1
  fi
fi
