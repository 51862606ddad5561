"""The execution input (DESIGN.md, "Request"), parsed and checked before anything else runs."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from gpufill import catalog
from gpufill.launch.user_data import DEFAULT_IMAGE, DEFAULT_MODEL_ID, SAFE_VALUES
from gpufill.constants import (
    DEFAULT_APPROVAL_TIMEOUT_SECONDS,
    DEFAULT_BATCH_MAX,
    DEFAULT_INSTANCE_TYPE,
    MAX_APPROVAL_TIMEOUT_SECONDS,
    MAX_COUNT,
    MIN_APPROVAL_TIMEOUT_SECONDS,
)

INSTANCE_TYPE_PATTERN = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
# A request id is the execution name of a provisioning run: 1..80 characters, none of the
# ones Step Functions refuses in a name (whitespace, brackets, wildcards, $, /, ...).
REQUEST_ID_PATTERN = re.compile(r"^[^\s<>{}\[\]?*\"#%\\^|~`$&,;:/]{1,80}$")
INSTANCE_ID_PATTERN = re.compile(r"^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
MAX_TEARDOWN_IDS = 1000
RESERVED_TAG_PREFIXES = ("gpufill:", "aws:")

Action = Literal["provision", "plan", "teardown", "status"]
Market = Literal["spot", "on-demand", "spot-then-on-demand"]
LaunchMode = Literal["partial", "exact"]
OnDemandStrategy = Literal["cost", "latency"]
Scoring = Literal["blended", "classic"]


class Request(BaseModel):
    """A provisioning request as the user wrote it; defaults are filled in by `normalise`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Action = "provision"
    instance_types: list[StrictStr] | None = Field(default=None, min_length=1, max_length=10)
    instance_type: StrictStr | None = None
    count: StrictInt = Field(default=1, ge=1)
    batch_max: StrictInt | None = Field(default=None, ge=1, le=MAX_COUNT)
    launch_mode: LaunchMode = "partial"
    market: Market = "spot"
    on_demand_strategy: OnDemandStrategy = "cost"
    origin_region: StrictStr | None = None
    regions: list[StrictStr] | None = Field(default=None, min_length=1, max_length=40)
    tags: dict[StrictStr, StrictStr] = Field(default_factory=dict, max_length=40)
    # What each instance serves (startup/startup.sh): the model synced from the bucket and the vLLM image.
    model_id: StrictStr = Field(default=DEFAULT_MODEL_ID, pattern=rf"^(?:{SAFE_VALUES['model_id'].pattern})$", max_length=200)
    image: StrictStr = Field(default=DEFAULT_IMAGE, pattern=rf"^(?:{SAFE_VALUES['image'].pattern})$", max_length=300)
    root_volume_gib: StrictInt = Field(default=40, ge=20, le=16384)
    # blended: spot placement scores are the capacity signal; classic: the AZ-count formula alone.
    scoring: Scoring = "blended"
    # teardown / status only: which instances to act on, and how long a teardown waits for a person.
    request_id: StrictStr | None = None
    instance_ids: list[StrictStr] | None = Field(default=None, min_length=1, max_length=MAX_TEARDOWN_IDS)
    # teardown only: every live instance of this deployment, behind the same approval.
    all: StrictBool = False
    approval_timeout_seconds: StrictInt | None = Field(
        default=None, ge=MIN_APPROVAL_TIMEOUT_SECONDS, le=MAX_APPROVAL_TIMEOUT_SECONDS
    )
    requested_by: StrictStr | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("request_id")
    @classmethod
    def _execution_name(cls, value: str | None) -> str | None:
        if value is not None and not REQUEST_ID_PATTERN.match(value):
            raise ValueError(
                f"{value!r} is not a request id: give the execution name of a provisioning run "
                "(1-80 characters, no spaces and none of <>{}[]?*\"#%\\^|~`$&,;:/)"
            )
        return value

    @field_validator("instance_ids")
    @classmethod
    def _instance_ids(cls, value: list[str] | None) -> list[str] | None:
        bad = [i for i in value or [] if not INSTANCE_ID_PATTERN.match(i)]
        if bad:
            raise ValueError(f"not EC2 instance ids (i-0123456789abcdef0): {', '.join(map(repr, bad))}")
        if value and len(set(value)) != len(value):
            raise ValueError("lists an instance more than once")
        return value

    @field_validator("count")
    @classmethod
    def _fits_one_run(cls, value: int) -> int:
        if value > MAX_COUNT:
            raise ValueError(
                f"at most {MAX_COUNT} instances per run (a run's state must fit Step Functions' 256 KB); "
                "start several runs for a larger fleet"
            )
        return value

    @field_validator("instance_types")
    @classmethod
    def _known_shape_types(cls, value: list[str] | None) -> list[str] | None:
        for name in value or []:
            _check_type_name(name)
        if value and len(set(value)) != len(value):
            raise ValueError("lists a type more than once")
        return value

    @field_validator("instance_type")
    @classmethod
    def _known_shape_type(cls, value: str | None) -> str | None:
        if value is not None:
            _check_type_name(value)
        return value

    @field_validator("regions")
    @classmethod
    def _known_regions(cls, value: list[str] | None) -> list[str] | None:
        unknown = [r for r in value or [] if r not in catalog.known_regions()]
        if unknown:
            raise ValueError(f"unknown region(s): {', '.join(map(repr, unknown))}")
        if value and len(set(value)) != len(value):
            raise ValueError("lists a region more than once")
        return value

    @field_validator("origin_region")
    @classmethod
    def _known_origin(cls, value: str | None) -> str | None:
        if value is not None and value not in catalog.known_regions():
            raise ValueError(f"unknown region {value!r}")
        return value

    @field_validator("tags")
    @classmethod
    def _user_tags_only(cls, value: dict[str, str]) -> dict[str, str]:
        reserved = [k for k in value if not k or k.lower().startswith(RESERVED_TAG_PREFIXES)]
        if reserved:
            raise ValueError(f"tag keys starting with 'gpufill:' or 'aws:' are reserved: {reserved}")
        return value

    @model_validator(mode="after")
    def _check_combinations(self) -> Request:
        problems: list[tuple[str, str]] = []
        if self.instance_types is not None and self.instance_type is not None:
            problems.append(("instance_type", "give either instance_type or instance_types, not both"))
        if self.batch_max is not None and self.batch_max > self.count:
            problems.append(("batch_max", f"must be between 1 and count ({self.count})"))
        problems += self._teardown_and_status_problems()
        if problems:
            raise RequestProblems(problems)
        return self

    def _teardown_and_status_problems(self) -> list[tuple[str, str]]:
        """request_id and instance_ids only mean something to teardown/status; a teardown names exactly one."""
        problems: list[tuple[str, str]] = []
        teardown_only = {
            "instance_ids": self.instance_ids,
            "approval_timeout_seconds": self.approval_timeout_seconds,
            "requested_by": self.requested_by,
        }
        if self.all and self.action != "teardown":
            problems.append(("all", f"only goes with action 'teardown' (this request's action is {self.action!r})"))
        for name, value in teardown_only.items():
            if value is not None and self.action != "teardown":
                problems.append((name, f"only goes with action 'teardown' (this request's action is {self.action!r})"))
        if self.request_id is not None and self.action not in ("teardown", "status"):
            problems.append(
                ("request_id", f"only goes with action 'teardown' or 'status' (this request's action is {self.action!r})")
            )
        if self.action == "teardown":
            named = [n for n, v in (("request_id", self.request_id), ("instance_ids", self.instance_ids)) if v is not None]
            named += ["all"] if self.all else []
            if len(named) > 1:
                problems.append(
                    (named[-1], f"a teardown names exactly one of request_id, instance_ids or all (this one names {', '.join(named)})")
                )
            elif not named:
                problems.append(
                    ("request_id", 'a teardown needs exactly one of request_id, instance_ids or "all": true (what to terminate)')
                )
        return problems

    def types(self) -> list[str]:
        if self.instance_types is not None:
            return list(self.instance_types)
        return [self.instance_type or DEFAULT_INSTANCE_TYPE]


def _check_type_name(name: str) -> None:
    if not INSTANCE_TYPE_PATTERN.match(name):
        raise ValueError(f"{name!r} is not an EC2 instance type name such as 'g6.xlarge'")


class RequestProblems(ValueError):
    """Several cross-field problems at once, so the user fixes them in one go."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{field}: {text}" for field, text in problems))


class ProvisionRequest(BaseModel):
    """The request with every default resolved: what the rest of the workflow reads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: str
    action: Action
    instance_types: list[str]
    count: int
    batch_max: int
    launch_mode: LaunchMode
    market: Market
    on_demand_strategy: OnDemandStrategy
    origin_region: str
    regions: list[str]
    tags: dict[str, str]
    model_id: str = DEFAULT_MODEL_ID
    image: str = DEFAULT_IMAGE
    root_volume_gib: int = 40
    scoring: Scoring = "blended"
    # teardown / status: the provisioning run or the instances to act on (request_id above is this run's own id).
    target_request_id: str | None = None
    instance_ids: list[str] | None = None
    all: bool = False
    approval_timeout_seconds: int = DEFAULT_APPROVAL_TIMEOUT_SECONDS
    requested_by: str | None = None


def normalise(request: Request, *, request_id: str, default_regions: list[str], home_region: str) -> ProvisionRequest:
    return ProvisionRequest(
        request_id=request_id,
        action=request.action,
        instance_types=request.types(),
        count=request.count,
        batch_max=request.batch_max or min(DEFAULT_BATCH_MAX, request.count),
        launch_mode=request.launch_mode,
        market=request.market,
        on_demand_strategy=request.on_demand_strategy,
        origin_region=request.origin_region or home_region,
        regions=list(request.regions or default_regions),
        tags=dict(request.tags),
        model_id=request.model_id,
        image=request.image,
        root_volume_gib=request.root_volume_gib,
        scoring=request.scoring,
        target_request_id=request.request_id,
        instance_ids=list(request.instance_ids) if request.instance_ids is not None else None,
        all=request.all,
        approval_timeout_seconds=request.approval_timeout_seconds or DEFAULT_APPROVAL_TIMEOUT_SECONDS,
        requested_by=request.requested_by,
    )


def describe_problems(error: ValidationError | RequestProblems) -> list[dict[str, str]]:
    """One entry per bad field, with the field's dotted path, for the InvalidRequest cause."""
    if isinstance(error, RequestProblems):
        return [{"field": field, "problem": text} for field, text in error.problems]
    found: list[dict[str, str]] = []
    for item in error.errors():
        ctx_error = (item.get("ctx") or {}).get("error")
        if isinstance(ctx_error, RequestProblems):
            found.extend({"field": f, "problem": t} for f, t in ctx_error.problems)
            continue
        field = ".".join(str(part) for part in item["loc"]) or "(request)"
        problem = "unknown field" if item["type"] == "extra_forbidden" else item["msg"]
        found.append({"field": field, "problem": problem})
    return found
