"""Replication of datastores to another ZDS appliance (or any OpenZFS host over SSH):
the records (:mod:`.model`, :mod:`.store`) and the pure planning of each run
(:mod:`.plan`). The use cases are in :mod:`appliance.services.replication`."""
