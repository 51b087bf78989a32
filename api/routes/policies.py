"""/api/v1/snapshot-policies and /api/v1/vcenters: scheduled snapshots with retention,
and the vCenters their VMware step logs in to."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from api import schemas
from api import schemas_policies as sp
from api.deps import EngineDep, PrincipalDep
from api.fields import PolicyPath, VcenterPath
from api.routes.common import ERRORS, WaitQuery, job_response
from appliance.policies.model import Hooks, VcenterSpec, VmwareStep
from appliance.policies.service import PolicyRequest, PolicyView, VcenterRequest

router = APIRouter(prefix="/snapshot-policies", tags=["snapshot policies"], responses=ERRORS)
vcenters = APIRouter(prefix="/vcenters", tags=["snapshot policies"], responses=ERRORS)


def policy_request(body: sp.PolicyPut) -> PolicyRequest:
    vm = body.vmware
    hooks = body.hooks
    return PolicyRequest(
        every=body.schedule.every, cron=body.schedule.cron, timezone=body.schedule.timezone,
        retention=body.retention.model_dump(), datastores=list(body.datastores.names),
        all_datastores=body.datastores.all, labels=dict(body.datastores.labels),
        enabled=body.enabled,
        vmware=VmwareStep(vm.vcenter, vm.quiesce, vm.memory, vm.timeout, vm.parallel)
        if vm else None,
        hooks=Hooks(tuple(hooks.pre), tuple(hooks.post), hooks.timeout) if hooks else None)


def policy_out(v: PolicyView) -> sp.PolicyOut:
    s = v.spec
    return sp.PolicyOut(
        name=s.name,
        schedule=sp.ScheduleOut(every=s.schedule.every, cron=s.schedule.cron,
                                 timezone=s.schedule.timezone),
        retention=sp.RetentionOut(**s.retention.as_dict()),
        datastores=sp.SelectorOut(names=list(s.selector.names), all=s.selector.all,
                                   labels=dict(s.selector.labels)),
        enabled=s.enabled,
        vmware=sp.VmwareOut(vcenter=s.vmware.vcenter, quiesce=s.vmware.quiesce,
                             memory=s.vmware.memory, timeout=s.vmware.timeout,
                             parallel=s.vmware.parallel) if s.vmware else None,
        hooks=sp.HooksOut(pre=list(s.hooks.pre), post=list(s.hooks.post),
                           timeout=s.hooks.timeout) if s.hooks else None,
        covered=v.covered, missing=v.missing,
        last_run=sp.PolicyRunOut(state=v.state.state, message=v.state.message,
                                 job_id=v.state.job_id, at=v.state.at) if v.state else None,
        last_slot=v.last_slot, next_run=v.next_run, created=s.created, updated=s.updated)


@router.get("", response_model=list[sp.PolicyOut])
def list_policies(engine: EngineDep, _: PrincipalDep) -> list[sp.PolicyOut]:
    return [policy_out(v) for v in engine.policies.list()]


@router.get("/{name}", response_model=sp.PolicyOut)
def get_policy(name: PolicyPath, engine: EngineDep, _: PrincipalDep) -> sp.PolicyOut:
    return policy_out(engine.policies.get(name))


@router.put("/{name}", response_model=sp.PolicyOut,
            responses={201: {"model": sp.PolicyOut, "description": "created"}})
def put_policy(name: PolicyPath, body: sp.PolicyPut, response: Response, engine: EngineDep,
               _: PrincipalDep) -> sp.PolicyOut:
    """Creates or replaces the policy and schedules it (idempotent: the same body again
    changes nothing). A new policy first runs at its first slot after now."""
    view, created = engine.policies.put(name, policy_request(body))
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return policy_out(view)


@router.delete("/{name}", status_code=204)
def delete_policy(name: PolicyPath, engine: EngineDep, _: PrincipalDep) -> Response:
    """Stops the schedule; the policy's snapshots stay (delete them one by one)."""
    engine.policies.delete(name)
    return Response(status_code=204)


@router.post("/{name}/run", status_code=202, response_model=schemas.JobOut)
async def run_policy(name: PolicyPath, engine: EngineDep, _: PrincipalDep,
                     wait: WaitQuery = 0) -> schemas.JobOut:
    """Runs the policy now (409 while a run of it is going); the job's result lists the
    snapshots taken and pruned, VMs not quiesced and hook output."""
    return await job_response(engine, lambda: engine.policies.run_now(name), wait)


def vcenter_out(vc: VcenterSpec, engine: EngineDep) -> sp.VcenterOut:
    users = [p.spec.name for p in engine.policies.list()
             if p.spec.vmware and p.spec.vmware.vcenter == vc.name]
    return sp.VcenterOut(name=vc.name, host=vc.host, port=vc.port, user=vc.user,
                         insecure=vc.insecure, password_set=bool(vc.password),
                         used_by=users, created=vc.created, updated=vc.updated)


@vcenters.get("", response_model=list[sp.VcenterOut])
def list_vcenters(engine: EngineDep, _: PrincipalDep) -> list[sp.VcenterOut]:
    return [vcenter_out(v, engine) for v in engine.policies.list_vcenters()]


@vcenters.get("/{name}", response_model=sp.VcenterOut)
def get_vcenter(name: VcenterPath, engine: EngineDep, _: PrincipalDep) -> sp.VcenterOut:
    return vcenter_out(engine.policies.get_vcenter(name), engine)


@vcenters.put("/{name}", response_model=sp.VcenterOut,
              responses={201: {"model": sp.VcenterOut, "description": "created"}})
def put_vcenter(name: VcenterPath, body: sp.VcenterPut, response: Response, engine: EngineDep,
                _: PrincipalDep) -> sp.VcenterOut:
    """Registers a vCenter (or ESXi host). With ``verify`` (default) it logs in first:
    wrong credentials are 422, an unreachable host 503, and nothing is stored. The
    password is never returned."""
    vc, created = engine.policies.put_vcenter(name, VcenterRequest(
        body.host, body.user, body.password, body.port, body.insecure, body.verify))
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return vcenter_out(vc, engine)


@vcenters.delete("/{name}", status_code=204)
def delete_vcenter(name: VcenterPath, engine: EngineDep, _: PrincipalDep) -> Response:
    """409 while a policy uses it."""
    engine.policies.delete_vcenter(name)
    return Response(status_code=204)
