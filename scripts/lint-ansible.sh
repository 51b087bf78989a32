#!/usr/bin/env bash
# Checks the Ansible recipe and the Vagrantfile, offline (no Galaxy, no PyPI, no boxes):
#   ansible-lint (production profile), ansible-playbook --syntax-check of every playbook,
#   the example inventory parses, `vagrant validate` of the Vagrantfile.
# Called by scripts/test.sh; needs the project venv (scripts/setup-host.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
venv=$("$here/scripts/venv-path")
export PATH="$venv/bin:$PATH"
export ANSIBLE_CONFIG="$here/ansible/ansible.cfg" ANSIBLE_NOCOLOR=1 ANSIBLE_LINT_NODEPS=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Keep Ansible's and ansible-lint's caches out of the checkout and out of $HOME's state.
export ANSIBLE_LOCAL_TEMP="$tmp/ansible-local" ANSIBLE_HOME="$tmp/ansible-home"

echo "-- ansible-lint (production profile)"
ansible-lint --offline --nocolor -q -c ansible/.ansible-lint ansible/

echo "-- ansible-playbook --syntax-check"
for pb in ansible/playbooks/*.yml; do
  ansible-playbook --syntax-check -i 'localhost,' "$pb" >/dev/null
  echo "   ok: $pb"
done

echo "-- example inventory"
ansible-inventory -i ansible/inventory/hosts.example.yml --list >/dev/null
echo "   ok: ansible/inventory/hosts.example.yml"

echo "-- vagrant validate"
if command -v vagrant >/dev/null 2>&1; then
  ruby -c Vagrantfile >/dev/null
  # No provider (VirtualBox, libvirt) is installed in CI: validate everything else.
  VAGRANT_DOTFILE_PATH="$tmp/vagrant" VAGRANT_HOME="$tmp/vagrant-home" VAGRANT_CHECKPOINT_DISABLE=1 \
    vagrant validate --ignore-provider
else
  echo "vagrant is not installed (scripts/setup-host.sh installs it)" >&2
  exit 1
fi
