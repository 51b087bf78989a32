"""Transports: what each protocol does to a datastore, behind one interface.

:mod:`.base` is the interface, :mod:`.storage` the two ZFS dataset kinds a transport
serves, :mod:`.nfs` and :mod:`.iscsi` the transports, :mod:`.registry` the list of them by
protocol name. docs/architecture.md ("Transports") says why this shape.
"""
