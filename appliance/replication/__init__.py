"""Replication of datastores to another ZDS appliance (or any OpenZFS host over SSH):
the records (:mod:`.model`, :mod:`.store`), the pure planning of each run (:mod:`.plan`),
and the use cases (:mod:`.service`, with its parts :mod:`.source`, :mod:`.target` and
:mod:`.promote`)."""
