"""ZDS engine: desired state for ZFS datastores, reconciled into ganesha and LIO."""

__version__ = "0.1.0"
