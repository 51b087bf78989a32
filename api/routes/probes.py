"""/api/v1/probes: built-in performance probes (profiles, runs as jobs, results, plots)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from api import convert, schemas
from api.deps import EngineDep, PrincipalDep
from api.fields import query
from api.routes.common import ERRORS, WaitQuery, finished
from api.schemas_probes import ProbeComparisonRun, ProbeResultIn, ProbeRun, given
from appliance.errors import NotFound
from appliance.patterns import anchored
from appliance.probes import plots
from appliance.probes.model import ProbeResult
from appliance.probes.service import (
    MAX_PLOT_IDS,
    ComparisonRequest,
    ProbeRequest,
    submit,
    submit_comparison,
)
from appliance.probes.store import ResultFilter

MAX_OFFSET = 1 << 31  # SQLite takes 64-bit integers; nobody pages that far

router = APIRouter(prefix="/probes", tags=["probes"], responses=ERRORS)


class ProbeJobOut(schemas.JobOut):
    result_id: str = Field(description="the id the result will have: GET /probes/results/{id}")


class ProbeProfileOut(BaseModel):
    name: str
    kind: str
    what: str
    tells_you: str
    reports: str
    source: str
    defaults: dict[str, Any]
    full: dict[str, Any]
    params: list[dict[str, Any]]
    published: list[dict[str, Any]]
    needs_directory: bool
    notes: str


class ProbeResultOut(BaseModel):
    id: str
    profile: str
    params: dict[str, Any]
    target: dict[str, Any]
    settings: dict[str, Any]
    started_at: str
    ended_at: str
    status: str
    summary: dict[str, float]
    steps: list[dict[str, Any]]
    cpu: dict[str, Any]
    arc: dict[str, Any] | None
    error: str
    extra: dict[str, Any]
    semantics: dict[str, Any] = Field(
        default_factory=dict,
        description="what the I/O meant on this target, made the same for local and "
                    "nfs/iscsi: reads (cache | disk), writes (sync | async), client_cache "
                    "(bypassed | used | none), layer, and per phase the fio options and "
                    "the ZFS properties set on the probe's scratch (docs/probes.md)")
    published: list[dict[str, Any]] = Field(default_factory=list)


def _out(r: ProbeResult, series: bool = True, published: bool = False,
         engine: Any = None) -> ProbeResultOut:
    d = r.to_dict()
    if not series:
        for st in d["steps"]:
            st["series"] = []
        d["cpu"] = {k: v for k, v in d["cpu"].items() if k != "series"}
        d["extra"] = {k: v for k, v in d["extra"].items() if k != "jobfile"}
    if published:
        from appliance.probes.compare import against_published

        d["published"] = [asdict(c) for c in against_published(r)]
    return ProbeResultOut(**d)


@router.get("/profiles", response_model=list[ProbeProfileOut])
def list_profiles(engine: EngineDep, _: PrincipalDep) -> list[ProbeProfileOut]:
    """Every profile of the catalogue with its parameters and the published figures."""
    return [ProbeProfileOut(**asdict(p)) for p in engine.probes.profiles()]


@router.post("", status_code=202, response_model=ProbeJobOut)
async def run_probe(body: ProbeRun, engine: EngineDep, _: PrincipalDep,
                    wait: WaitQuery = 0) -> ProbeJobOut:
    """Checks the request (profile, overrides, datastore, free space, one probe per
    datastore) and runs the probe as a job; the result is kept even if it fails."""
    request = ProbeRequest(body.profile, body.datastore, body.target, given(body.overrides))
    probe_id, job = await run_in_threadpool(submit, engine.jobs, engine.probes, request)
    job = await finished(engine, job, wait)
    return ProbeJobOut(**convert.job_out(job).model_dump(), result_id=probe_id)


class ComparisonJobOut(schemas.JobOut):
    comparison_id: str = Field(description="GET /probes/comparisons/{id}: the table, "
                                           "filled in as each leg ends")


class ComparisonRowOut(BaseModel):
    leg: str
    target: str
    baseline: str = Field(description="the leg this one is measured against ('' for a "
                                      "baseline)")
    runs: int
    failed: int
    iops: float | None
    mbps: float | None
    lat_p50_ms: float | None
    lat_p99_ms: float | None
    cpu_pct: float | None = Field(description="the appliance's CPU busy %, median")
    cpu_us_per_io: float | None = Field(description="the appliance's CPU time per I/O "
                                                    "(busy fraction x CPUs / IOPS)")
    iops_vs_baseline: float | None
    p99_vs_baseline: float | None


class ComparisonRunOut(BaseModel):
    id: str
    leg: str | None
    round: int | None
    status: str
    error: str


class ComparisonOut(BaseModel):
    id: str
    pool: str
    profile: str
    legs: list[str]
    rounds: int
    complete: bool = Field(description="every leg has run in every round")
    rows: list[ComparisonRowOut] = Field(description="one per leg: medians over its rounds")
    results: list[ComparisonRunOut] = Field(description="every run, in running order: "
                                                        "GET /probes/results/{id}")


@router.post("/comparisons", status_code=202, response_model=ComparisonJobOut)
async def run_comparison(body: ProbeComparisonRun, engine: EngineDep, _: PrincipalDep,
                         wait: WaitQuery = 0) -> ComparisonJobOut:
    """The same fio profile on one pool through every protocol (and straight on a
    dataset and a zvol as the baselines), interleaved over ``rounds``: one job."""
    request = ComparisonRequest(body.pool, body.profile, tuple(body.legs), body.rounds,
                                given(body.overrides))
    comparison_id, job = await run_in_threadpool(submit_comparison, engine.jobs,
                                                 engine.probes, request)
    job = await finished(engine, job, wait)
    return ComparisonJobOut(**convert.job_out(job).model_dump(), comparison_id=comparison_id)


@router.get("/comparisons/{comparison_id}", response_model=ComparisonOut)
def get_comparison(comparison_id: str, engine: EngineDep, _: PrincipalDep) -> ComparisonOut:
    """The table (one row per leg: IOPS, MB/s, latency, the appliance's CPU per I/O, each
    against its baseline) and every run so far."""
    return ComparisonOut(**engine.probes.comparison(comparison_id))


@router.get("/comparisons/{comparison_id}/plot",
            responses={200: {"content": {"image/svg+xml": {}, "image/png": {}}}})
def plot_comparison(comparison_id: str, engine: EngineDep, _: PrincipalDep,
                    format: Literal["svg", "png"] = "svg") -> Response:
    """IOPS, p99 latency and CPU per I/O, one bar per leg."""
    return Response(content=engine.probes.comparison_plot(comparison_id, format),
                    media_type="image/svg+xml" if format == "svg" else "image/png")


@router.get("/comparisons/{comparison_id}/report", response_class=HTMLResponse)
def comparison_report(comparison_id: str, engine: EngineDep,
                      _: PrincipalDep) -> HTMLResponse:
    """One self-contained HTML page: the table, the chart, then every run."""
    return HTMLResponse(engine.probes.comparison_report(comparison_id))


@router.post("/results", status_code=201, response_model=ProbeResultOut)
def post_result(body: ProbeResultIn, engine: EngineDep, _: PrincipalDep) -> ProbeResultOut:
    """A result measured on a client (``zds probe run --server ...``)."""
    return _out(engine.probes.record_client(body.as_sent()))


@router.get("/results", response_model=list[ProbeResultOut])
def list_results(
    engine: EngineDep, _: PrincipalDep,
    profile: str | None = None, datastore: str | None = None,
    target: str | None = None, status: str | None = None,
    since: str | None = None, until: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    series: bool = False,
) -> list[ProbeResultOut]:
    """Newest first; time series left out unless ``series=true``."""
    f = ResultFilter(profile, datastore, target, status, since, until, limit, offset)
    return [_out(r, series=series) for r in engine.probes.list(f)]


@router.get("/results/{result_id}", response_model=ProbeResultOut)
def get_result(result_id: str, engine: EngineDep, _: PrincipalDep) -> ProbeResultOut:
    """One result with its time series and the published figures beside it."""
    return _out(engine.probes.get(result_id), published=True)


@router.delete("/results/{result_id}", status_code=204)
def delete_result(result_id: str, engine: EngineDep, _: PrincipalDep) -> Response:
    engine.probes.store.delete(result_id)
    return Response(status_code=204)


@router.get("/compare")
def compare_results(a: str, b: str, engine: EngineDep, _: PrincipalDep) -> dict[str, Any]:
    """b / a for every metric both have (summary and per step); ``better`` by direction."""
    return asdict(engine.probes.compare(a, b))


@router.get("/results/{result_id}/plot",
            responses={200: {"content": {"image/svg+xml": {}, "image/png": {}}}})
def plot_result(
    result_id: str, engine: EngineDep, _: PrincipalDep,
    kind: Literal["timeseries", "percentiles", "sweep", "size-sweep"] | None = None,
    format: Literal["svg", "png"] = "svg",
    with_: Annotated[str | None, query(
        anchored(f",*(?:[^,]+(?:,+[^,]+){{0,{MAX_PLOT_IDS - 2}}})?,*"),
        f"more result ids, comma separated: at most {MAX_PLOT_IDS - 1}", alias="with")] = None,
) -> Response:
    """IOPS and latency over time, latency percentiles, sweep curves or size-sweep bars;
    ``with`` overlays other results (e.g. local vs nfs), up to 20 in all."""
    ids = [result_id, *[i for i in (with_ or "").split(",") if i]]
    data = engine.probes.plot(ids, kind, format)
    return Response(content=data,
                    media_type="image/svg+xml" if format == "svg" else "image/png")


@router.get("/report", response_class=HTMLResponse)
def html_report(
    ids: Annotated[str, query(anchored(f",*[^,]+(?:,+[^,]+){{0,{MAX_PLOT_IDS - 1}}},*"),
                              f"result ids, comma separated: 1 to {MAX_PLOT_IDS}")],
    engine: EngineDep, _: PrincipalDep, title: str = "ZDS probe report",
) -> HTMLResponse:
    """One self-contained HTML page (tables + inline SVG) for up to 20 results."""
    return HTMLResponse(engine.probes.report([i for i in ids.split(",") if i], title))


@router.post("/{result_id}/cancel", response_model=dict[str, Any])
def cancel_probe(result_id: str, engine: EngineDep, _: PrincipalDep) -> dict[str, Any]:
    """Stops a running probe (fio is killed by PID); its result is saved as cancelled."""
    if not engine.probes.cancel(result_id):
        raise NotFound(f"no running probe {result_id!r}")
    return {"cancelled": result_id}


@router.get("/running", response_model=dict[str, str])
def running(engine: EngineDep, _: PrincipalDep) -> dict[str, str]:
    """datastore -> probe id of the probes running now."""
    return dict(engine.probes.registry.running())


__all__ = ["plots", "router"]
