"""``/metrics`` in the Prometheus text format (prometheus_client), from the collector's
totals and last collection: a scrape reads memory only, never the host.

Per datastore: counters (ops, bytes, latency seconds summed, discards, iSCSI initiator
commands) labelled ``datastore``, ``pool``, ``protocol``; a mean latency is
``rate(..._latency_seconds_total) / rate(..._ops_total)``. No per-export histograms
(high cardinality hurt ganesha's own exporter, nfs-ganesha issue 992). Per pool: gauges
from the last collection (size, allocated, fragmentation, zpool iostat -l waits, SLOG /
L2ARC present). Machine-wide ARC counters. The collector's own health.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector as PromCollector

from appliance.metrics.collector import Collector, PoolSample

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_DS = (  # (counter name without _total, key, help, scale)
    ("zds_datastore_read_ops", "read_ops", "Read operations", 1.0),
    ("zds_datastore_write_ops", "write_ops", "Write operations", 1.0),
    ("zds_datastore_read_bytes", "read_bytes", "Bytes read", 1.0),
    ("zds_datastore_write_bytes", "write_bytes", "Bytes written", 1.0),
    ("zds_datastore_read_latency_seconds", "read_latency_ns",
     "Sum of read latencies (NFS: ganesha; iSCSI: block layer incl. queue)", 1e-9),
    ("zds_datastore_write_latency_seconds", "write_latency_ns", "Sum of write latencies",
     1e-9),
    ("zds_datastore_discards", "discards", "Discard (UNMAP) requests on the zvol", 1.0),
    ("zds_datastore_initiator_commands", "initiator_commands",
     "SCSI commands LIO counted from the target's initiators", 1.0),
)

_WAITS = ("total_wait", "disk_wait", "syncq_wait", "asyncq_wait")


class _Exposition(PromCollector):
    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        c = self.collector
        totals = c.totals
        labels = ["datastore", "pool", "protocol"]
        for name, key, doc, scale in _DS:
            fam = CounterMetricFamily(name, doc, labels=labels)
            for ds, counts in sorted(totals.datastores.items()):
                pool, proto = totals.labels.get(ds, ("", ""))
                fam.add_metric([ds, pool, proto], counts.get(key, 0) * scale)
            yield fam

        latest = c.latest
        pools = latest.pools if latest else []
        gauges: dict[str, tuple[str, Callable[[PoolSample], float]]] = {
            "zds_pool_size_bytes": ("Pool size", lambda p: p.size),
            "zds_pool_allocated_bytes": ("Pool allocated", lambda p: p.allocated),
            "zds_pool_capacity_ratio": ("Pool fill (0-1)", lambda p: p.capacity / 100),
            "zds_pool_fragmentation_ratio": (
                "Free-space fragmentation (0-1)",
                lambda p: (p.fragmentation or 0) / 100),
            "zds_pool_slog": ("1 when the pool has a separate log device",
                              lambda p: float(p.slog)),
            "zds_pool_l2arc": ("1 when the pool has a cache device", lambda p: float(p.l2arc)),
        }
        for gname, (doc, get) in gauges.items():
            g = GaugeMetricFamily(gname, doc, labels=["pool"])
            for p in pools:
                g.add_metric([p.pool], float(get(p)))
            yield g
        ops = GaugeMetricFamily("zds_pool_ops_per_second",
                                "Pool operations per second (zpool iostat, last collection)",
                                labels=["pool", "op"])
        bw = GaugeMetricFamily("zds_pool_bytes_per_second", "Pool bandwidth (last collection)",
                               labels=["pool", "op"])
        wait = GaugeMetricFamily("zds_pool_wait_seconds",
                                 "Mean wait per I/O (zpool iostat -l, last collection)",
                                 labels=["pool", "kind", "op"])
        for p in pools:
            for op in ("read", "write"):
                if (v := p.iostat.get(f"{op}_ops")) is not None:
                    ops.add_metric([p.pool, op], float(v))
                if (v := p.iostat.get(f"{op}_bytes")) is not None:
                    bw.add_metric([p.pool, op], float(v))
                for kind in _WAITS:
                    if (v := p.iostat.get(f"{kind}_{op}")) is not None:
                        wait.add_metric([p.pool, kind.removesuffix("_wait"), op], v / 1e9)
        yield ops
        yield bw
        yield wait

        for key, doc in (("hits", "ARC hits"), ("misses", "ARC misses"),
                         ("l2_hits", "L2ARC hits"), ("l2_misses", "L2ARC misses")):
            fam = CounterMetricFamily(f"zds_arc_{key}", doc)
            if key in totals.arc:
                fam.add_metric([], float(totals.arc[key]))
                yield fam

        yield CounterMetricFamily("zds_collector_runs", "Collections run",
                                  value=float(totals.runs))
        yield CounterMetricFamily("zds_collector_failures",
                                  "Collections with a source that could not be read",
                                  value=float(totals.failures))
        yield GaugeMetricFamily("zds_collector_last_success_timestamp_seconds",
                                "Unix time of the last collection without errors",
                                value=totals.last_success)
        yield GaugeMetricFamily("zds_collector_duration_seconds",
                                "How long the last collection took",
                                value=totals.last_duration)


def exposition(collector: Collector | None) -> bytes:
    """The text format of everything the collector knows (an empty page without it)."""
    registry = CollectorRegistry(auto_describe=False)
    if collector is not None:
        registry.register(_Exposition(collector))
    return generate_latest(registry)
