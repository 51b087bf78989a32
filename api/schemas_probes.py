"""Bodies of /api/v1/probes (pydantic): a probe run and a result posted by a client.

A profile's parameters are its own (appliance/probes/profiles.py): a run's ``overrides``
and a posted result's ``params`` are one model per profile, made here from the catalogue,
and the bodies are unions told apart by ``profile``, so the OpenAPI document lists which
parameters each profile takes and what each may be. Parameter values are lenient on
purpose (the CLI passes what people type): a whole number may come as ``"8"``, a size as
``"64m"``, a flag as ``"yes"``, a list as ``"1,2,4"``; each form is in the document.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model

from api.fields import INTEGRAL, Int, Name, PoolName, text
from api.schemas import ProbeTargetName, Strict
from appliance.patterns import anchored, int_range, no_case
from appliance.probes import params as p
from appliance.probes.profiles import PROFILES, ParamSpec, Profile
from appliance.probes.protocols import BASELINES, MAX_ROUNDS
from appliance.transports.registry import protocols

_SIZE_NUMBER = "0*[1-9][0-9]*"  # not 0
_SIZE_UNIT = "[KkMmGgTt]?(?:[Ii]?[Bb])?"
_SIZE_ITEM = _SIZE_NUMBER + _SIZE_UNIT  # in a comma-separated list (its blanks dropped)


def _whole(lo: int, hi: int, what: str) -> Any:
    """A whole number from ``lo`` to ``hi``, or its digits as a string."""
    return (Annotated[int, Field(ge=lo, le=hi), INTEGRAL]
            | Annotated[str, text(anchored(f" *{int_range(lo, hi)} *"),
                                  f"{what}: {lo} to {hi}, as digits")])


def _size() -> Any:
    return (Annotated[int, Field(ge=1), INTEGRAL]
            | Annotated[str, text(anchored(f" *{_SIZE_NUMBER} *{_SIZE_UNIT} *"),
                                  "a size: bytes, or a number with k, m, g or t (64m)")])


def _listed(item: Any, item_text: str, single: Any) -> Any:
    """1 to 64 items: a list, a comma-separated string, or one item alone."""
    listed = f"[ ,]*{item_text}(?:[ ,]*,[ ,]*{item_text}){{0,{p.MAX_LIST - 1}}}[ ,]*"
    return (Annotated[list[item], Field(min_length=1, max_length=p.MAX_LIST)]
            | Annotated[str, text(anchored(listed), f"1 to {p.MAX_LIST} items, comma "
                                  "separated (1,2,4)")]
            | single)


def _flag() -> Any:
    words = "|".join(no_case(w) for w in (*p.TRUE_WORDS, *p.FALSE_WORDS))
    if TYPE_CHECKING:
        zero_one = int
    else:
        zero_one = Annotated[Literal[0, 1], BeforeValidator(lambda v: int(v) if isinstance(
            v, float) and v in (0.0, 1.0) else v)]
    return bool | zero_one | Annotated[str, text(anchored(f"(?:{words})"),
                                                 "true/false, 1/0, yes/no, on/off")]


def param_type(spec: ParamSpec) -> Any:
    """What a value of ``spec`` may be, as :func:`appliance.probes.params.coerce` takes it."""
    if spec.kind in p.INT_RANGES:
        return _whole(*p.INT_RANGES[spec.kind], spec.kind)
    if spec.kind == "size":
        return _size()
    if spec.kind == "bool":
        return _flag()
    if spec.kind == "int_list":
        lo, hi = p.LIST_ITEM_RANGE
        return _listed(_whole(lo, hi, "an item"), int_range(lo, hi),
                       Annotated[int, Field(ge=lo, le=hi), INTEGRAL])
    if spec.kind == "size_list":
        return _listed(_size(), _SIZE_ITEM, Annotated[int, Field(ge=1), INTEGRAL])
    if spec.kind == "choice":
        return Literal[spec.choices]
    raise AssertionError(spec.kind)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("_", "-").split("-"))


def params_model(profile: Profile) -> type[BaseModel]:
    """The parameters ``profile`` takes (each optional: its default otherwise), and
    ``preset``."""
    fields: dict[str, Any] = {
        "preset": (Literal["default", "full"],
                   Field(default="default", description="full: the source's parameters"))}
    for spec in profile.params:
        fields[spec.name] = (param_type(spec), Field(default=None, description=spec.help))
    model: type[BaseModel] = create_model(f"{_camel(profile.name)}Params", __base__=Strict,
                                          __doc__=f"Parameters of {profile.name}.",
                                          **fields)
    return model


PARAMS = {name: params_model(profile) for name, profile in PROFILES.items()}


def given(model: BaseModel) -> dict[str, Any]:
    """The parameters a request set (what the engine's defaults do not cover)."""
    return model.model_dump(exclude_unset=True)


class RunBase(Strict):
    """What every probe run has; the profile's own model adds ``profile`` and
    ``overrides``."""

    profile: str
    datastore: Name = Field(description="a ready datastore; fio profiles on it take the "
                            "target of its protocol (or local), and file-set profiles need "
                            "a file system")
    target: ProbeTargetName = "local"
    overrides: BaseModel


def _run_model(name: str) -> type[RunBase]:
    params = PARAMS[name]
    model: type[RunBase] = create_model(
        f"ProbeRun{_camel(name)}", __base__=RunBase, __doc__=f"A run of {name}.",
        profile=(Literal[name], ...),  # type: ignore[valid-type,arg-type]
        overrides=(params, Field(default_factory=params,
                                 description="the profile's parameters to change")))
    return model


# the legs a comparison may name: every protocol, and the baseline of each storage kind
LEG_NAMES = (*BASELINES.values(), *protocols())
FIO_PROFILES = tuple(n for n, prof in PROFILES.items() if prof.kind == "fio")
if TYPE_CHECKING:
    LegName = str
else:
    LegName = Literal[LEG_NAMES]


class ComparisonBase(Strict):
    """What every protocol comparison has; the profile's own model adds ``profile`` and
    ``overrides``."""

    pool: PoolName = Field(description="the pool whose scratch datasets and zvols are "
                           "measured")
    profile: str
    legs: list[LegName] = Field(
        default_factory=list, max_length=len(LEG_NAMES),
        description="protocols and baselines (dataset, zvol) to run, in this order; "
                    "empty: every one this appliance serves")
    rounds: Int = Field(default=1, ge=1, le=MAX_ROUNDS,
                        description="each leg runs once per round; odd rounds in reverse")
    overrides: BaseModel


def _comparison_model(name: str) -> type[ComparisonBase]:
    params = PARAMS[name]
    model: type[ComparisonBase] = create_model(
        f"ProbeComparison{_camel(name)}", __base__=ComparisonBase,
        __doc__=f"A protocol comparison of {name}.",
        profile=(Literal[name], ...),  # type: ignore[valid-type,arg-type]
        overrides=(params, Field(default_factory=params,
                                 description="the profile's parameters to change")))
    return model


class ClientTarget(BaseModel):
    """Where a client measured: ``kind`` client and the datastore (others kept as sent)."""

    model_config = ConfigDict(extra="allow", strict=True)

    kind: Literal["client"]
    datastore: Name = Field(description="a datastore of this appliance")


class StepIn(Strict):
    name: str
    label: str
    point: dict[str, Any]
    metrics: dict[str, float]
    series: list[dict[str, float]] = Field(default_factory=list)


class ResultBase(Strict):
    """What every posted result has; the profile's own model adds ``profile`` and
    ``params``."""

    id: str = Field(pattern="^[A-Za-z0-9]{1,32}$", description="1-32 letters and digits, "
                    "new on this appliance")
    profile: str
    params: BaseModel
    target: ClientTarget
    settings: dict[str, Any]
    started_at: str = Field(description="ISO 8601 UTC")
    ended_at: str
    status: Literal["ok", "failed", "cancelled"]
    summary: dict[str, float] = Field(default_factory=dict)
    steps: list[StepIn] = Field(default_factory=list)
    cpu: dict[str, Any] = Field(default_factory=dict)
    arc: dict[str, Any] | None = None
    error: str = ""
    extra: dict[str, Any] = Field(default_factory=dict)
    semantics: dict[str, Any] = Field(default_factory=dict)

    def as_sent(self) -> dict[str, Any]:
        """The result as the engine reads it: the parameters the client gave, no
        others."""
        return {**self.model_dump(exclude={"params"}), "params": given(self.params)}


def _result_model(name: str) -> type[ResultBase]:
    model: type[ResultBase] = create_model(
        f"ProbeResult{_camel(name)}", __base__=ResultBase,
        __doc__=f"A result of {name} measured on a client.",
        profile=(Literal[name], ...),  # type: ignore[valid-type,arg-type]
        params=(PARAMS[name], Field(default_factory=PARAMS[name])))
    return model


if TYPE_CHECKING:
    ProbeRun = RunBase
    ProbeResultIn = ResultBase
    ProbeComparisonRun = ComparisonBase
else:
    ProbeComparisonRun = Annotated[
        Union[tuple(_comparison_model(n) for n in FIO_PROFILES)],  # noqa: UP007
        Field(discriminator="profile")]
    ProbeRun = Annotated[Union[tuple(_run_model(n) for n in PROFILES)],  # noqa: UP007
                         Field(discriminator="profile")]
    ProbeResultIn = Annotated[Union[tuple(_result_model(n) for n in PROFILES)],  # noqa: UP007
                              Field(discriminator="profile")]
