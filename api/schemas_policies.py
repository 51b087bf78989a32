"""Request and response bodies of snapshot policies and vCenters (pydantic)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from api.fields import (
    Cron,
    HookArgv,
    Int,
    Labels,
    Name,
    PolicyInterval,
    Port,
    RetentionCount,
    TimeZone,
    VcenterHost,
    VcenterPassword,
    VcenterUser,
)
from api.schemas import Strict
from appliance.policies.retention import CLASSES
from appliance.policies.service import HOOK_TIMEOUT, VMWARE_PARALLEL, VMWARE_TIMEOUT


class ScheduleBody(Strict):
    """Exactly one of ``every`` and ``cron``."""

    model_config = ConfigDict(json_schema_extra={"oneOf": [
        {"required": ["every"], "properties": {"every": {"type": ["integer", "string"]},
                                               "cron": {"type": "null"}}},
        {"required": ["cron"], "properties": {"cron": {"type": "string"},
                                              "every": {"type": "null"}}},
    ]})

    every: PolicyInterval | None = Field(
        default=None, description="an interval: 90, 30s, 15m, 6h, 1d (from 10 s to 366 "
        "days; slots counted from 00:00 UTC)", examples=["15m"])
    cron: Cron | None = Field(default=None, description="5-field cron times read in "
                              "timezone (Debian cron's DST rules); values out of range and "
                              "times that never come (30 Feb) are refused",
                              examples=["0 2 * * *"])
    timezone: TimeZone = Field(default="UTC", description="an IANA name this appliance's "
                               "tzdata knows; also sets the day/week/month boundaries of "
                               "retention", examples=["Europe/Berlin"])


class RetentionBody(Strict):
    """How many snapshots of each class to keep (0 to 10000); at least one above 0."""

    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"required": [c], "properties": {c: {"minimum": 1}}} for c in CLASSES]})

    frequent: RetentionCount = Field(default=0, description="the N newest snapshots")
    hourly: RetentionCount = Field(default=0, description="the newest of each of the N "
                                   "newest hours that have one")
    daily: RetentionCount = 0
    weekly: RetentionCount = 0
    monthly: RetentionCount = 0
    yearly: RetentionCount = 0


class SelectorBody(Strict):
    """Which datastores: at least one of names, all and labels."""

    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"required": ["names"], "properties": {"names": {"minItems": 1}}},
        {"required": ["all"], "properties": {"all": {"const": True}}},
        {"required": ["labels"], "properties": {"labels": {"minProperties": 1}}},
    ]})

    names: list[Name] = Field(default_factory=list, description="datastores that exist",
                              examples=[["vmfs-nfs01"]])
    all: bool = Field(default=False, description="every datastore, now and future")
    labels: Labels = Field(default_factory=dict, description="datastores carrying "
                           "all these labels", examples=[{"protect": "gold"}])


class VmwareBody(Strict):
    vcenter: Name = Field(description="a vCenter registered with PUT /vcenters/{name}",
                          examples=["vc1"])
    quiesce: bool = True
    memory: bool = False
    timeout: float = Field(default=300, ge=VMWARE_TIMEOUT[0], le=VMWARE_TIMEOUT[1],
                           description="seconds for all VM snapshots together")
    parallel: Int = Field(default=4, ge=VMWARE_PARALLEL[0], le=VMWARE_PARALLEL[1],
                          description="VM snapshots at once")


class HooksBody(Strict):
    pre: HookArgv = Field(default_factory=list, description="argv; the program must be "
                          "an executable in the hooks directory (/etc/zds/hooks), by name "
                          "or full path", examples=[["freeze-db", "--all"]])
    post: HookArgv = Field(default_factory=list, examples=[["thaw-db"]])
    timeout: float = Field(default=60, ge=HOOK_TIMEOUT[0], le=HOOK_TIMEOUT[1],
                           description="seconds per command")


class PolicyPut(Strict):
    """Create or replace (idempotent)."""

    model_config = ConfigDict(json_schema_extra={"examples": [
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
    vmware: VmwareBody | None = Field(default=None, description="needs the appliance's "
                                      "vSphere client")
    hooks: HooksBody | None = None


class ScheduleOut(BaseModel):
    every: int | None
    cron: str | None
    timezone: str


class RetentionOut(BaseModel):
    frequent: int
    hourly: int
    daily: int
    weekly: int
    monthly: int
    yearly: int


class SelectorOut(BaseModel):
    names: list[str]
    all: bool
    labels: dict[str, str]


class VmwareOut(BaseModel):
    vcenter: str
    quiesce: bool
    memory: bool
    timeout: float
    parallel: int


class HooksOut(BaseModel):
    pre: list[str]
    post: list[str]
    timeout: float


class PolicyRunOut(BaseModel):
    state: str = Field(description="ok | warning | failed")
    message: str
    job_id: str | None
    at: float


class PolicyOut(BaseModel):
    name: str
    schedule: ScheduleOut
    retention: RetentionOut
    datastores: SelectorOut
    enabled: bool
    vmware: VmwareOut | None
    hooks: HooksOut | None
    covered: list[str] = Field(description="ready datastores it snapshots now")
    missing: list[str] = Field(description="named datastores that do not exist")
    last_run: PolicyRunOut | None
    last_slot: float | None = Field(description="unix time of the last scheduled slot run")
    next_run: float | None = Field(description="unix time of the next slot")
    created: float
    updated: float


class VcenterPut(Strict):
    host: VcenterHost = Field(examples=["vcenter.example.org"])
    port: Port = 443
    user: VcenterUser = Field(examples=["zds@vsphere.local"])
    password: VcenterPassword = Field(description="stored on the appliance, never returned")
    insecure: bool = Field(default=False, description="accept a certificate that does not "
                                                     "verify (self-signed)")
    verify: bool = Field(default=True, description="log in now (needs the appliance's vSphere "
                         "client): refuse unreachable hosts (503) and wrong credentials or "
                         "a certificate that does not verify (422)")


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
