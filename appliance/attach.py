"""Attach instructions: what a datastore's answer tells ESXi and libvirt/KVM admins.

Each transport renders its own (``Transport.attach``: the exact ``esxcli`` commands and a
libvirt storage-pool XML plus virsh commands); this module holds what they share. Every
value in them was validated on the way in and is shell-quoted or XML-escaped anyway.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field


@dataclass(frozen=True)
class AttachInstructions:
    esxi: list[str]
    libvirt_pool_xml: str
    virsh: list[str]
    notes: list[str]
    linux: list[str] = field(default_factory=list)  # a Linux host's own commands (NVMe/TCP)


def shell_quote(value: str) -> str:
    return shlex.quote(value)


def virsh_commands(name: str) -> list[str]:
    """Define, start and autostart the pool whose XML the instructions give."""
    return [
        f"virsh pool-define {shell_quote(name + '-pool.xml')}",
        f"virsh pool-start {shell_quote(name)}",
        f"virsh pool-autostart {shell_quote(name)}",
    ]
