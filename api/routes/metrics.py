"""Metrics: history per datastore and pool, the latest numbers, advice, who am I, and the
Prometheus page (``/metrics``, outside /api/v1, same tokens: readonly may scrape)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, Field

from api.deps import EngineDep, PrincipalDep
from api.fields import DatastorePath, PoolPath, query
from api.routes.common import ERRORS
from appliance.metrics import prometheus
from appliance.metrics.collector import DatastoreSample, PoolSample
from appliance.metrics.service import SINCE_PATTERN, STEP_PATTERN, Series

router = APIRouter(tags=["metrics"], responses=ERRORS)
scrape = APIRouter(tags=["metrics"], responses=ERRORS)

SinceQuery = Annotated[str | None, query(
    SINCE_PATTERN, "start: a duration back from now (15m, 1h, 2d; up to 400 days), a unix "
    "time or an ISO 8601 date-time (2026-11-30T08:00Z), in the past; default 1h",
    examples=["1h"])]
StepQuery = Annotated[str | None, query(
    STEP_PATTERN, "bucket width (10s, 5m, 1h or seconds); default: the window / 300, at "
    "least the collection interval; at most 1000 points in the window", examples=["1m"])]


class PointOut(BaseModel):
    ts: float = Field(description="unix time of the bucket's start")
    values: dict[str, float | None]


class SeriesOut(BaseModel):
    subject: str
    since: float
    until: float
    step: float
    points: list[PointOut]


class LatestDatastoreOut(BaseModel):
    name: str
    pool: str
    protocol: str
    ts: float
    interval: float
    read_iops: float
    write_iops: float
    read_mbps: float
    write_mbps: float
    read_latency_ms: float | None
    write_latency_ms: float | None
    probe: bool = Field(description="a probe's I/O is included")


class LatestPoolOut(BaseModel):
    pool: str
    ts: float
    size: int
    allocated: int
    capacity: int
    fragmentation: int | None
    slog: bool
    l2arc: bool
    iostat: dict[str, int | None]
    arc_hit_ratio: float | None


class FindingOut(BaseModel):
    code: str = Field(examples=["sync-writes-no-slog"])
    severity: str = Field(examples=["warning"])
    title: str
    message: str
    action: str
    evidence: dict[str, Any]


class WhoAmIOut(BaseModel):
    name: str
    role: str = Field(examples=["admin", "readonly"])


def _series(s: Series) -> SeriesOut:
    return SeriesOut(subject=s.subject, since=s.since, until=s.until, step=s.step,
                     points=[PointOut(ts=p.ts, values=p.values) for p in s.points])


def latest_out(s: DatastoreSample) -> LatestDatastoreOut:
    return LatestDatastoreOut(
        name=s.name, pool=s.pool, protocol=s.protocol, ts=s.ts, interval=s.interval,
        read_iops=round(s.rate("read_ops"), 3), write_iops=round(s.rate("write_ops"), 3),
        read_mbps=round(s.rate("read_bytes") / 1e6, 4),
        write_mbps=round(s.rate("write_bytes") / 1e6, 4),
        read_latency_ms=_r(s.latency_ms("read")), write_latency_ms=_r(s.latency_ms("write")),
        probe=s.probe)


def _r(v: float | None) -> float | None:
    return round(v, 4) if v is not None else None


def pool_latest_out(p: PoolSample) -> LatestPoolOut:
    lookups = p.arc.get("hits", 0) + p.arc.get("misses", 0)
    return LatestPoolOut(pool=p.pool, ts=p.ts, size=p.size, allocated=p.allocated,
                         capacity=p.capacity, fragmentation=p.fragmentation, slog=p.slog,
                         l2arc=p.l2arc, iostat=dict(p.iostat),
                         arc_hit_ratio=round(p.arc.get("hits", 0) / lookups, 4)
                         if lookups else None)


@router.get("/datastores/{name}/metrics", response_model=SeriesOut, tags=["datastores"])
def datastore_metrics(name: DatastorePath, engine: EngineDep, _: PrincipalDep,
                      since: SinceQuery = None,
                      step: StepQuery = None) -> SeriesOut:
    """Read/write IOPS, MB/s and mean latency (ms) per step, from the bounded history
    (every sample for 24 h, 5-minute sums for 30 days). NFS: nfs-ganesha's per-export
    counters; iSCSI: the zvol's block-layer counters (latency includes queueing)."""
    return _series(engine.metrics.datastore_series(name, since, step))


@router.get("/datastores/{name}/advice", response_model=list[FindingOut], tags=["datastores"])
def datastore_advice(name: DatastorePath, engine: EngineDep, _: PrincipalDep) -> list[FindingOut]:
    """Findings from the last 24 h of measurements, the configuration and the probe
    results, each with the numbers behind it and what to do; empty when nothing stands
    out (no finding without evidence)."""
    return [FindingOut(code=f.code, severity=f.severity, title=f.title, message=f.message,
                       action=f.action, evidence=dict(f.evidence))
            for f in engine.metrics.advice(name)]


@router.get("/pools/{name}/metrics", response_model=SeriesOut, tags=["pools"])
def pool_metrics(name: PoolPath, engine: EngineDep, _: PrincipalDep, since: SinceQuery = None,
                 step: StepQuery = None) -> SeriesOut:
    """zpool iostat -l per step (ops/s, bytes/s, total / disk / sync-queue / async-queue
    waits in ms), fill, fragmentation, SLOG/L2ARC present, ARC and L2ARC hit ratios."""
    return _series(engine.metrics.pool_series(name, since, step))


@router.get("/metrics/datastores", response_model=list[LatestDatastoreOut])
def latest_datastores(engine: EngineDep, _: PrincipalDep) -> list[LatestDatastoreOut]:
    """Every datastore's numbers from the last collection (none before the second)."""
    return [latest_out(s) for _, s in sorted(engine.metrics.latest_datastores().items())]


@router.get("/metrics/pools", response_model=list[LatestPoolOut])
def latest_pools(engine: EngineDep, _: PrincipalDep) -> list[LatestPoolOut]:
    col = engine.metrics.latest()
    return [pool_latest_out(p) for p in col.pools] if col else []


@router.get("/system/whoami", response_model=WhoAmIOut, tags=["system"])
def whoami(principal: PrincipalDep) -> WhoAmIOut:
    """The token's name and role (the console hides what a readonly token cannot do)."""
    return WhoAmIOut(name=principal.name, role=principal.role)


@scrape.get("/metrics", response_class=Response,
            responses={200: {"content": {prometheus.CONTENT_TYPE: {}}}})
def prometheus_metrics(engine: EngineDep, _: PrincipalDep) -> Response:
    """Prometheus text format; any valid token (readonly too)."""
    return Response(prometheus.exposition(engine.metrics.collector),
                    media_type=prometheus.CONTENT_TYPE)
