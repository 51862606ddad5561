"""The execution input (DESIGN.md, "Request"), parsed and checked before anything else runs."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from gpufill import catalog
from gpufill.constants import DEFAULT_BATCH_MAX, DEFAULT_INSTANCE_TYPE, MAX_COUNT

INSTANCE_TYPE_PATTERN = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
RESERVED_TAG_PREFIXES = ("gpufill:", "aws:")

Action = Literal["provision", "plan", "teardown", "status"]
Market = Literal["spot", "on-demand", "spot-then-on-demand"]
LaunchMode = Literal["partial", "exact"]
OnDemandStrategy = Literal["cost", "latency"]


class Request(BaseModel):
    """A provisioning request as the user wrote it; defaults are filled in by `normalise`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Action = "provision"
    instance_types: list[StrictStr] | None = Field(default=None, min_length=1, max_length=10)
    instance_type: StrictStr | None = None
    count: StrictInt = Field(default=1, ge=1, le=MAX_COUNT)
    batch_max: StrictInt | None = Field(default=None, ge=1, le=MAX_COUNT)
    launch_mode: LaunchMode = "partial"
    market: Market = "spot"
    on_demand_strategy: OnDemandStrategy = "cost"
    origin_region: StrictStr | None = None
    regions: list[StrictStr] | None = Field(default=None, min_length=1, max_length=40)
    tags: dict[StrictStr, StrictStr] = Field(default_factory=dict, max_length=40)

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
        if problems:
            raise RequestProblems(problems)
        return self

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
