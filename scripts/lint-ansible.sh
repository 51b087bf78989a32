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

echo "-- zds.toml from the zds_api role is what the engine reads"
ansible localhost -i localhost, -c local -o -m ansible.builtin.template \
  -a "src=ansible/roles/zds_api/templates/zds.toml.j2 dest=$tmp/zds.toml mode=0644" \
  -e ansible_python_interpreter="$venv/bin/python" \
  -e @ansible/roles/zds_api/defaults/main.yml >/dev/null
python - "$tmp/zds.toml" <<'PY'
import sys
from pathlib import Path

from appliance.settings import load_settings

path = Path(sys.argv[1])
if not path.is_file():
    sys.exit(f"the zds_api role did not render {path}")
s = load_settings(path)
expected = {
    "listen": "0.0.0.0", "port": 8443, "tls": True,
    "tls_cert": Path("/etc/zds/tls/cert.pem"), "tls_key": Path("/etc/zds/tls/key.pem"),
    "state_dir": Path("/var/lib/zds"), "ganesha_exports_dir": Path("/var/lib/zds/ganesha"),
    "iqn_prefix": "iqn.2026-11.io.zds", "iscsi_portal": ("0.0.0.0", 3260),
    "nqn_prefix": "nqn.2026-11.io.zds", "nvme_address": ("0.0.0.0", 4420),
    "firstboot_pool": "tank", "firstboot_disks": ("/dev/disk/by-id/virtio-zdsdata*",),
    "firstboot_layout": "mirror", "firstboot_demo_disk_size": "8G",
    "admin_token_file": Path("/etc/zds/admin-token"), "max_overcommit": 20.0,
    "root_authorized_keys": Path("/root/.ssh/authorized_keys"),
}
wrong = {k: (getattr(s, k), v) for k, v in expected.items() if getattr(s, k) != v}
if wrong:
    sys.exit(f"zds.toml rendered by the role does not give the expected settings: {wrong}")
print("   ok: zds.toml renders and loads with the expected settings")
PY

echo "-- vagrant validate"
if command -v vagrant >/dev/null 2>&1; then
  ruby -c Vagrantfile >/dev/null
  # No provider (VirtualBox, libvirt) is installed in CI: validate everything else.
  VAGRANT_DOTFILE_PATH="$tmp/vagrant" VAGRANT_HOME="$tmp/vagrant-home" VAGRANT_CHECKPOINT_DISABLE=1 \
    vagrant validate --ignore-provider
  # ...so also run the provider blocks against a recording stand-in for Vagrant and check
  # what they configure: forwards on 127.0.0.1 only, 2 data disks per provider, host.yml.
  ruby - Vagrantfile <<'RUBY'
class Recorder
  def initialize(name, log) = (@name = name; @log = log)
  def method_missing(meth, *args, **kw, &blk)
    @log << [@name, meth, args, kw]
    child = Recorder.new(meth == :provider ? args.first : @name, @log)
    blk&.call(child, Recorder.new(:override, @log))
    child
  end
  def respond_to_missing?(*) = true
end
module Vagrant
  LOG = []
  def self.configure(_version) = yield(Recorder.new(:config, LOG))
end
load ARGV.fetch(0)
log = Vagrant::LOG
forwards = log.select { |_, m, a, _| m == :network && a.first == "forwarded_port" }
bad = forwards.reject { |*, kw| kw[:host_ip] == "127.0.0.1" }
abort "Vagrantfile: forwards not bound to 127.0.0.1: #{bad.inspect}" unless bad.empty?
wanted = [8443, 2049, 20048, 3260]
missing = wanted - forwards.map { |*, kw| kw[:guest] }
abort "Vagrantfile: no forward for guest ports #{missing}" unless missing.empty?
lv = log.count { |n, m, a, _| n == :libvirt && m == :storage && a.first == :file }
vb = log.count { |n, m, a, _| n == :virtualbox && m == :customize && a.first.first == "createmedium" }
abort "Vagrantfile: data disks libvirt=#{lv} virtualbox=#{vb}, want 2 each" unless lv == 2 && vb == 2
pb = log.find { |_, m, _, _| m == :playbook= }&.dig(2, 0)
abort "Vagrantfile: provisioned by #{pb.inspect}" unless pb == "ansible/playbooks/host.yml" && File.file?(pb)
puts "   ok: Vagrantfile providers: #{forwards.size} forwards on 127.0.0.1, 2 data disks (libvirt, VirtualBox), #{pb}"
RUBY
else
  echo "vagrant is not installed (scripts/setup-host.sh installs it)" >&2
  exit 1
fi
