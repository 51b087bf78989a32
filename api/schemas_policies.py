"""Request and response bodies of snapshot policies and vCenters (pydantic)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from api.schemas import Strict


class ScheduleBody(Strict):
    every: int | str | None = Field(default=None, description="an interval: 90, 30s, 15m, "
                                    "6h, 1d (slots counted from 00:00 UTC)", examples=["15m"])
    cron: str | None = Field(default=None, description="5-field cron times read in "
                             "timezone (Debian cron's DST rules)", examples=["0 2 * * *"])
    timezone: str = Field(default="UTC", description="IANA name; also sets the day/week/"
                          "month boundaries of retention", examples=["Europe/Berlin"])


class RetentionBody(Strict):
    frequent: int = Field(default=0, ge=0, description="the N newest snapshots")
    hourly: int = Field(default=0, ge=0, description="the newest of each of the N newest "
                                                     "hours that have one")
    daily: int = Field(default=0, ge=0)
    weekly: int = Field(default=0, ge=0)
    monthly: int = Field(default=0, ge=0)
    yearly: int = Field(default=0, ge=0)


class SelectorBody(Strict):
    names: list[str] = Field(default_factory=list, examples=[["vmfs-nfs01"]])
    all: bool = Field(default=False, description="every datastore, now and future")
    labels: dict[str, str] = Field(default_factory=dict, description="datastores carrying "
                                   "all these labels", examples=[{"protect": "gold"}])


class VmwareBody(Strict):
    vcenter: str = Field(description="a vCenter registered with PUT /vcenters/{name}",
                         examples=["vc1"])
    quiesce: bool = True
    memory: bool = False
    timeout: float = Field(default=300, description="seconds for all VM snapshots together")
    parallel: int = Field(default=4, description="VM snapshots at once")


class HooksBody(Strict):
    pre: list[str] = Field(default_factory=list, description="argv; the program must be "
                           "in the hooks directory (/etc/zds/hooks)",
                           examples=[["freeze-db", "--all"]])
    post: list[str] = Field(default_factory=list, examples=[["thaw-db"]])
    timeout: float = Field(default=60, description="seconds per command")


class PolicyPut(Strict):
    """Create or replace (idempotent)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"schedule": {"every": "15m"}, "retention": {"frequent": 4, "hourly": 24, "daily": 7},
         "datastores": {"labels": {"protect": "gold"}}},
        {"schedule": {"cron": "0 2 * * *", "timezone": "Europe/Berlin"},
         "retention": {"daily": 14, "weekly": 8, "monthly": 6},
         "datastores": {"names": ["vmfs-nfs01"]},
         "vmware": {"vcenter": "vc1", "quiesce": True}},
    ]})

    schedule: ScheduleBody
    retention: RetentionBody
    datastores: SelectorBody
    enabled: bool = True
    vmware: VmwareBody | None = None
    hooks: HooksBody | None = None


class PolicyRunOut(BaseModel):
    state: str = Field(description="ok | warning | failed")
    message: str
    job_id: str | None
    at: float


class PolicyOut(BaseModel):
    name: str
    schedule: ScheduleBody
    retention: RetentionBody
    datastores: SelectorBody
    enabled: bool
    vmware: VmwareBody | None
    hooks: HooksBody | None
    covered: list[str] = Field(description="ready datastores it snapshots now")
    missing: list[str] = Field(description="named datastores that do not exist")
    last_run: PolicyRunOut | None
    last_slot: float | None = Field(description="unix time of the last scheduled slot run")
    next_run: float | None = Field(description="unix time of the next slot")
    created: float
    updated: float


class VcenterPut(Strict):
    host: str = Field(examples=["vcenter.example.org"])
    port: int = 443
    user: str = Field(examples=["zds@vsphere.local"])
    password: str = Field(description="stored on the appliance, never returned")
    insecure: bool = Field(default=False, description="accept a certificate that does not "
                                                     "verify (self-signed)")
    verify: bool = Field(default=True, description="log in now: refuse unreachable hosts and "
                                                   "wrong credentials")


class VcenterOut(BaseModel):
    name: str
    host: str
    port: int
    user: str
    insecure: bool
    password_set: bool
    used_by: list[str]
    created: float
    updated: float


def dump(model: BaseModel | None) -> dict[str, Any] | None:
    return model.model_dump() if model is not None else None
