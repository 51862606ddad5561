"""The execution input (docs/request.md), parsed and checked before anything else runs: the request
as the user wrote it, its resolution into what the workflow reads (`normalise`), and its problems
said in the words of the JSON the user wrote. The rules of single values are in request_values.py,
the objects it holds in request_options.py, the rules between fields in request_rules.py."""

from __future__ import annotations

import difflib
from datetime import timedelta
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gpufill import catalog
from gpufill.bootstrap.user_data import (
    DEFAULT_IMAGE,
    DEFAULT_MODEL_ID,
    IMAGE_PATTERN,
    MAX_IMAGE_LENGTH,
    MAX_IMAGE_NAME_LENGTH,
    MAX_MODEL_ID_LENGTH,
    MODEL_ID_PATTERN,
    image_name,
)
from gpufill.constants import (
    DEFAULT_APPROVAL_TIMEOUT_SECONDS,
    DEFAULT_BATCH_MAX,
    DEFAULT_INSTANCE_TYPE,
    DEFAULT_READY_TIMEOUT_SECONDS,
    DEFAULT_ROOT_VOLUME_GIB,
    MAX_APPROVAL_TIMEOUT_SECONDS,
    MAX_COUNT,
    MAX_MAX_LIFETIME_SECONDS,
    MAX_READY_TIMEOUT_SECONDS,
    MAX_ROOT_VOLUME_GIB,
    MIN_APPROVAL_TIMEOUT_SECONDS,
    MIN_MAX_LIFETIME_SECONDS,
)
from gpufill.models.request_options import CapacityBlock, Refill, WaitForCapacity
from gpufill.models.request_rules import RequestProblems, RequestRules
from gpufill.models.request_values import (
    CAPACITY_RESERVATION_ID_PATTERN,
    INSTANCE_ID_PATTERN,
    MAX_CAPACITY_RESERVATION_IDS,
    MAX_TEARDOWN_IDS,
    REQUEST_ID_PATTERN,
    Action,
    CapacityReservations,
    LaunchMode,
    Market,
    OnDemandStrategy,
    Placement,
    Scoring,
    Facts,
    check_no_repeats,
    check_tags,
    check_types,
    duration_words,
    iso_duration,
    json_kind,
    shorten,
)
from gpufill.models.request_resolved import CapacityBlockAsk, ResolvedRequest


class Request(RequestRules, BaseModel):
    """A provisioning request as the user wrote it; defaults are filled in by `normalise`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Action = "provision"
    instance_types: list[StrictStr] | None = Field(default=None, min_length=1, max_length=10)
    instance_type: StrictStr | None = None
    count: StrictInt = Field(default=1, ge=1)
    # Above count is not an error: a run launches min(batch_max, count) at a time.
    batch_max: StrictInt | None = Field(default=None, ge=1)
    launch_mode: LaunchMode = "fleet"  # chosen by the benchmark (docs/benchmark.md)
    market: Market = "spot"
    on_demand_strategy: OnDemandStrategy = "cost"
    origin_region: StrictStr | None = None
    regions: list[StrictStr] | None = Field(default=None, min_length=1, max_length=40)
    tags: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    # What each instance serves (startup/startup.sh): the model synced from the bucket and the vLLM image.
    model_id: StrictStr = DEFAULT_MODEL_ID
    image: StrictStr = DEFAULT_IMAGE
    # The launch uses max(this, the AMI's root snapshot size).
    root_volume_gib: StrictInt = Field(default=DEFAULT_ROOT_VOLUME_GIB, ge=1, le=MAX_ROOT_VOLUME_GIB)
    # price-capacity: regions by spot price per likely fill (region-level placement scores), chosen
    # by the benchmark (docs/benchmark.md); blended: AZ-level placement scores in the classic
    # points; classic: the AZ-count formula alone.
    scoring: Scoring = "price-capacity"
    facts: Facts = "warm"
    # Gang placement (policy/gang.py): once the first instance lands, the rest must share its
    # region or AZ; all_or_nothing rolls back a gang that cannot complete.
    placement: Placement = "any"
    all_or_nothing: StrictBool = False
    # teardown / status only: which instances to act on, and how long a teardown waits for a person.
    request_id: StrictStr | None = None
    instance_ids: list[StrictStr] | None = Field(default=None, min_length=1, max_length=MAX_TEARDOWN_IDS)
    # teardown only: every live instance of this deployment, behind the same approval.
    all: StrictBool = False
    approval_timeout_seconds: StrictInt | None = Field(
        default=None, ge=MIN_APPROVAL_TIMEOUT_SECONDS, le=MAX_APPROVAL_TIMEOUT_SECONDS
    )
    requested_by: StrictStr | None = Field(default=None, min_length=1, max_length=200)
    # Durable options (docs/request.md): each added at the end, each with its own check.
    wait_for_capacity: WaitForCapacity | None = None

    # provision only: how long the run waits for each model server to answer (ISO 8601 duration;
    # unset = DEFAULT_READY_TIMEOUT_SECONDS; PT0S = do not wait, serving is not checked).
    ready_timeout: timedelta | None = None

    @field_validator("ready_timeout", mode="before")
    @classmethod
    def _iso_8601_duration(cls, value: Any) -> Any:
        return value if value is None else iso_duration(value, "'PT30M' or 'PT1H30M'")

    @field_validator("ready_timeout")
    @classmethod
    def _ready_timeout_fits(cls, value: timedelta | None, info: ValidationInfo) -> timedelta | None:
        if value is None:
            return value
        action = info.data.get("action", "provision")
        if action != "provision":
            raise ValueError(f"only goes with action 'provision' (this request's action is {action!r})")
        seconds = value.total_seconds()
        if seconds != int(seconds):
            raise ValueError("give whole seconds (the run checks the model servers once a minute)")
        if not 0 <= seconds <= MAX_READY_TIMEOUT_SECONDS:
            raise ValueError(f"must be from PT0S (do not wait) to PT{MAX_READY_TIMEOUT_SECONDS // 3600}H")
        return value
    # provision only: replace an instance EC2 reclaims (spot interruption, hardware failure)
    # with one from a refill run, until a teardown of the request.
    maintain: StrictBool = False
    # Set by StartRefill on the runs it starts, never by a user: which request and instance this
    # run replaces, so its instances are recorded and tagged as that request's.
    refill: Refill | None = None
    # provision only: the spend guard. When this much time has passed since the request was
    # accepted, the request's teardown starts on its own (still behind the approval).
    max_lifetime: timedelta | None = None
    # teardown only, set by the spend guard's schedule: why the teardown was asked.
    trigger: Literal["max_lifetime"] | None = None

    @field_validator("max_lifetime", mode="before")
    @classmethod
    def _lifetime_is_iso_8601(cls, value: Any) -> Any:
        return value if value is None else iso_duration(value, "'PT8H' or 'P2D'")

    @field_validator("max_lifetime")
    @classmethod
    def _lifetime_within_bounds(cls, value: timedelta | None) -> timedelta | None:
        if value is None:
            return value
        seconds = value.total_seconds()
        if seconds != int(seconds):
            raise ValueError("give whole seconds, such as 'PT8H'")
        if not MIN_MAX_LIFETIME_SECONDS <= seconds <= MAX_MAX_LIFETIME_SECONDS:
            raise ValueError(
                f"must be from PT{MIN_MAX_LIFETIME_SECONDS // 60}M to P{MAX_MAX_LIFETIME_SECONDS // 86400}D, "
                f"got {duration_words(seconds)}"
            )
        return value

    capacity_reservations: CapacityReservations = "open"
    # Reservations to use besides the ones tagged for this deployment (open or targeted alike).
    capacity_reservation_ids: list[StrictStr] | None = Field(default=None, min_length=1, max_length=MAX_CAPACITY_RESERVATION_IDS)
    # provision only: buy a Capacity Block for ML when the earlier paths cannot fill (or at once
    # with market "capacity-block"), only after a person approves the purchase.
    capacity_block: CapacityBlock | None = None

    @field_validator("capacity_reservation_ids")
    @classmethod
    def _reservation_ids(cls, value: list[str] | None) -> list[str] | None:
        bad = [i for i in value or [] if not CAPACITY_RESERVATION_ID_PATTERN.match(i)]
        if bad:
            raise ValueError(
                f"not Capacity Reservation ids ('cr-' and 17 hexadecimal digits, such as cr-0123456789abcdef0): "
                f"{', '.join(shorten(i) for i in bad)}"
            )
        if value and len(set(value)) != len(value):
            raise ValueError("lists a reservation more than once")
        return value

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
    def _known_types(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            check_types(value)
            check_no_repeats(value)
        return value

    @field_validator("instance_type")
    @classmethod
    def _known_type(cls, value: str | None) -> str | None:
        if value is not None:
            check_types([value])
        return value

    @field_validator("regions")
    @classmethod
    def _known_regions(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            unknown = [r for r in value if r not in catalog.known_regions()]
            if unknown:
                raise ValueError(f"unknown region(s): {', '.join(map(repr, unknown))}")
            check_no_repeats(value)
        return value

    @field_validator("origin_region")
    @classmethod
    def _known_origin(cls, value: str | None) -> str | None:
        if value is not None and value not in catalog.known_regions():
            raise ValueError(f"unknown region {value!r}")
        return value

    @field_validator("tags")
    @classmethod
    def _tags_ec2_accepts(cls, value: dict[str, str]) -> dict[str, str]:
        check_tags(value)
        return value

    @field_validator("model_id")
    @classmethod
    def _hugging_face_repo_id(cls, value: str) -> str:
        if len(value) > MAX_MODEL_ID_LENGTH or ".." in value or not MODEL_ID_PATTERN.fullmatch(value):
            raise ValueError(
                f"{shorten(value)} is not a Hugging Face model id: give 'owner/name' such as {DEFAULT_MODEL_ID!r} "
                "(letters, digits, '-', '_' and '.'; no '..' or '--'; neither part starting or ending with "
                "'-' or '.'; each part at most 96 characters)"
            )
        return value

    @field_validator("image")
    @classmethod
    def _oci_reference(cls, value: str) -> str:
        if len(value) > MAX_IMAGE_LENGTH or ".." in value or not IMAGE_PATTERN.fullmatch(value) or (
            len(image_name(value)) > MAX_IMAGE_NAME_LENGTH
        ):
            raise ValueError(
                f"{shorten(value)} is not a container image reference: give [registry/]path[:tag][@sha256:digest] "
                f"such as {DEFAULT_IMAGE!r} (the path in lowercase letters, digits and single separators; no '..')"
            )
        return value

    @model_validator(mode="after")
    def _check_combinations(self) -> Request:
        problems = self.combination_problems()
        if problems:
            raise RequestProblems(problems)
        return self

    def types(self) -> list[str]:
        if self.instance_types is not None:
            return list(self.instance_types)
        return [self.instance_type or DEFAULT_INSTANCE_TYPE]


def _seconds(value: timedelta | None) -> int | None:
    return None if value is None else int(value.total_seconds())


def normalise(request: Request, *, request_id: str, default_regions: list[str], home_region: str) -> ResolvedRequest:
    return ResolvedRequest(
        request_id=request_id,
        action=request.action,
        instance_types=request.types(),
        count=request.count,
        batch_max=min(request.batch_max or DEFAULT_BATCH_MAX, request.count),
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
        facts=request.facts,
        placement=request.placement,
        all_or_nothing=request.all_or_nothing,
        target_request_id=request.request_id,
        instance_ids=list(request.instance_ids) if request.instance_ids is not None else None,
        all=request.all,
        approval_timeout_seconds=request.approval_timeout_seconds or DEFAULT_APPROVAL_TIMEOUT_SECONDS,
        requested_by=request.requested_by,
        wait_for_capacity_seconds=(
            int(request.wait_for_capacity.deadline.total_seconds()) if request.wait_for_capacity else None
        ),
        wait_first_delay_seconds=_seconds(request.wait_for_capacity.first_delay if request.wait_for_capacity else None),
        wait_max_delay_seconds=_seconds(request.wait_for_capacity.max_delay if request.wait_for_capacity else None),
        ready_timeout_seconds=(
            DEFAULT_READY_TIMEOUT_SECONDS if request.ready_timeout is None else int(request.ready_timeout.total_seconds())
        ),
        maintain=request.maintain,
        refill=request.refill,
        max_lifetime_seconds=int(request.max_lifetime.total_seconds()) if request.max_lifetime else None,
        expires_at=request.refill.expires_at.isoformat() if request.refill and request.refill.expires_at else None,
        trigger=request.trigger,
        capacity_reservations=request.capacity_reservations,
        capacity_reservation_ids=list(request.capacity_reservation_ids) if request.capacity_reservation_ids else None,
        capacity_block=(
            CapacityBlockAsk(
                max_upfront_usd=float(request.capacity_block.max_upfront_usd),
                duration_hours=request.capacity_block.duration_hours,
                start_within_seconds=int(request.capacity_block.start_within.total_seconds()),
            )
            if request.capacity_block
            else None
        ),
    )


def describe_problems(error: ValidationError | RequestProblems) -> list[dict[str, str]]:
    """One entry per bad field, with the field's dotted path, for the InvalidRequest cause.

    Pydantic's own wording names Python types and ends with a documentation link; a user wrote
    JSON, so each problem is said in JSON's words ("must be a whole number, got a string").
    """
    if isinstance(error, RequestProblems):
        return [{"field": field, "problem": text} for field, text in error.problems]
    found: list[dict[str, str]] = []
    for item in error.errors():
        ctx_error = (item.get("ctx") or {}).get("error")
        if isinstance(ctx_error, RequestProblems):
            found.extend({"field": f, "problem": t} for f, t in ctx_error.problems)
            continue
        field = ".".join(str(part) for part in item["loc"]) or "(request)"
        found.append({"field": field, "problem": _plain_problem(item)})
    return found


def not_an_object(value: Any) -> list[dict[str, str]]:
    """The problem of an execution input that is valid JSON but not an object."""
    return [{"field": "(request)", "problem": f"the request must be a JSON object, got {json_kind(value)}"}]


# Pydantic error types whose text names a Python type: what the field must be, in JSON's words.
_EXPECTED = {
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a JSON object",
    "bool_type": "true or false",
    "model_type": "a JSON object",
    "model_attributes_type": "a JSON object",
    "time_delta_parsing": "an ISO 8601 duration such as 'PT30M'",
}


def _plain_problem(item: Any) -> str:
    kind = item["type"]
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(str(item["loc"][-1]), Request.model_fields, n=1)
        return "unknown field" + (f"; did you mean {close[0]!r}?" if close else "")
    if kind in _EXPECTED:
        subject = "" if item["loc"] else "the request "
        return f"{subject}must be {_EXPECTED[kind]}, got {json_kind(item['input'])}"
    # item["msg"] never carries pydantic's "For further information visit" link (only str(error) does).
    message = str(item["msg"]).removeprefix("Value error, ")
    for python_word in ("Input should", "String should", "List should"):
        message = message.replace(python_word, "must")
    return message.replace(" after validation", "")
