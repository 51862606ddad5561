"""The execution input (docs/request.md), parsed and checked before anything else runs."""

from __future__ import annotations

import difflib
import re
from datetime import timedelta
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
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
from gpufill.constants import (
    DEFAULT_APPROVAL_TIMEOUT_SECONDS,
    DEFAULT_BATCH_MAX,
    DEFAULT_INSTANCE_TYPE,
    DEFAULT_READY_TIMEOUT_SECONDS,
    DEFAULT_ROOT_VOLUME_GIB,
    EC2_MAX_TAG_KEY_LENGTH,
    EC2_MAX_TAG_VALUE_LENGTH,
    EC2_MAX_TAGS,
    GPUFILL_TAG_COUNT,
    MAX_APPROVAL_TIMEOUT_SECONDS,
    MAX_CAPACITY_BLOCK_UPFRONT_USD,
    MAX_COUNT,
    MAX_MAX_LIFETIME_SECONDS,
    MAX_READY_TIMEOUT_SECONDS,
    MAX_ROOT_VOLUME_GIB,
    MAX_WAIT_FOR_CAPACITY_SECONDS,
    MIN_APPROVAL_TIMEOUT_SECONDS,
    WAIT_LONGEST_DELAY_SECONDS,
    WAIT_MIN_DELAY_SECONDS,
    MIN_MAX_LIFETIME_SECONDS,
    SUPPORTED_ARCHITECTURE,
)
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

INSTANCE_TYPE_PATTERN = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
# A request id is the execution name of a provisioning run: 1..80 characters, none of the
# ones Step Functions refuses in a name (whitespace, brackets, wildcards, $, /, ...).
REQUEST_ID_PATTERN = re.compile(r"^[^\s<>{}\[\]?*\"#%\\^|~`$&,;:/]{1,80}$")
INSTANCE_ID_PATTERN = re.compile(r"^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
CAPACITY_RESERVATION_ID_PATTERN = re.compile(r"^cr-[0-9a-f]{17}$")
MAX_CAPACITY_RESERVATION_IDS = 20
MAX_TEARDOWN_IDS = 1000
RESERVED_TAG_PREFIXES = ("gpufill:", "aws:")
# The characters every AWS service accepts in a tag (EC2 itself is more lenient, but the same
# tags are read by Cost Explorer, Resource Groups and IAM conditions): letters, digits, spaces
# and + - = . _ : / @.
TAG_TEXT_PATTERN = re.compile(r"^[\w +\-=.:/@]*$")
MAX_USER_TAGS = EC2_MAX_TAGS - GPUFILL_TAG_COUNT

Action = Literal["provision", "plan", "teardown", "status"]
# What to launch and where it serves: meaningful to provision and plan only. (`regions` is not
# among them: a teardown or status searches the regions it is given.)
PROVISION_ONLY_FIELDS = (
    "instance_types", "instance_type", "count", "batch_max", "launch_mode", "market", "on_demand_strategy",
    "origin_region", "tags", "model_id", "image", "root_volume_gib", "scoring", "facts",
    "capacity_reservations", "capacity_reservation_ids", "capacity_block",
)
# "capacity-block": straight to a Capacity Block for ML (docs/capacity-blocks.md).
Market = Literal["spot", "on-demand", "spot-then-on-demand", "capacity-block"]
LaunchMode = Literal["partial", "exact", "fleet"]
OnDemandStrategy = Literal["cost", "latency"]
Scoring = Literal["price-capacity", "blended", "classic"]
# "warm": rank from what an earlier run of the deployment scored and prepared while it is fresh
# (policy/warm_facts.py); "fresh": score every region and prepare every region anew.
Facts = Literal["warm", "fresh"]
Placement = Literal["any", "same-region", "same-az"]
# On-Demand Capacity Reservations (docs/capacity-reservations.md): "open" uses this deployment's
# reservations with room before Spot/On-Demand, "only" launches into them alone, "none" ignores them.
CapacityReservations = Literal["none", "open", "only"]


class WaitForCapacity(BaseModel):
    """`wait_for_capacity`: how long a provisioning run may wait for capacity, as an ISO 8601 duration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    deadline: timedelta
    # The backoff between tries: the first wait, doubling after each try up to max_delay. Unset:
    # the deployment's (WAIT_FIRST_DELAY_SECONDS, WAIT_MAX_DELAY_SECONDS), else 60 s and 2 minutes.
    first_delay: timedelta | None = None
    max_delay: timedelta | None = None

    @field_validator("deadline", "first_delay", "max_delay", mode="before")
    @classmethod
    def _iso_duration(cls, value: Any) -> Any:
        # Pydantic also reads bare numbers and "HH:MM:SS"; docs/request.md promises ISO 8601 ("PT6H").
        if not isinstance(value, str) or not value.startswith("P"):
            raise ValueError(f"must be an ISO 8601 duration such as 'PT6H' or 'P2D', got {_shown(value)}")
        return value

    @field_validator("deadline")
    @classmethod
    def _within_a_week(cls, value: timedelta) -> timedelta:
        if value < timedelta(seconds=1):
            raise ValueError("must be at least one second, such as 'PT6H'")
        if value > timedelta(seconds=MAX_WAIT_FOR_CAPACITY_SECONDS):
            raise ValueError(f"may be at most 7 days ('P7D'), got {value.total_seconds() / 86400:g} days")
        return value

    @field_validator("first_delay", "max_delay")
    @classmethod
    def _a_delay(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and not WAIT_MIN_DELAY_SECONDS <= value.total_seconds() <= WAIT_LONGEST_DELAY_SECONDS:
            raise ValueError(
                f"must be from {WAIT_MIN_DELAY_SECONDS} seconds to {WAIT_LONGEST_DELAY_SECONDS // 3600} hours "
                f"('PT{WAIT_MIN_DELAY_SECONDS}S' to 'PT{WAIT_LONGEST_DELAY_SECONDS // 3600}H'), got {value.total_seconds():g} seconds"
            )
        return value

    @model_validator(mode="after")
    def _first_within_max(self) -> WaitForCapacity:
        if self.first_delay is not None and self.max_delay is not None and self.first_delay > self.max_delay:
            raise ValueError(
                f"first_delay ({self.first_delay.total_seconds():g} s) is longer than max_delay "
                f"({self.max_delay.total_seconds():g} s): the waits grow from the first up to the cap"
            )
        return self


class CapacityBlock(BaseModel):
    """`capacity_block`: a Capacity Block for ML the run may buy, behind a person's approval
    (docs/capacity-blocks.md). AWS's rules are in models/capacity_block_rules.py."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_upfront_usd: float = Field(gt=0, le=MAX_CAPACITY_BLOCK_UPFRONT_USD)
    duration_hours: StrictInt
    start_within: timedelta

    @field_validator("max_upfront_usd", mode="before")
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"must be a number of US dollars such as 60000, got {json_kind(value)}")
        return value

    @field_validator("duration_hours")
    @classmethod
    def _aws_duration(cls, value: int) -> int:
        from gpufill.models.capacity_block_rules import duration_problem

        problem = duration_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("start_within", mode="before")
    @classmethod
    def _iso_duration(cls, value: Any) -> Any:
        if not isinstance(value, str) or not value.startswith("P"):
            raise ValueError(f"must be an ISO 8601 duration such as 'P14D' or 'P2W', got {_shown(value)}")
        return value

    @field_validator("start_within")
    @classmethod
    def _within_eight_weeks(cls, value: timedelta) -> timedelta:
        from gpufill.models.capacity_block_rules import MAX_START_WITHIN

        if value < timedelta(hours=1):
            raise ValueError("must be at least an hour ('PT1H'): a block starts at a whole hour at the earliest")
        if value > MAX_START_WITHIN:
            raise ValueError(f"may be at most 8 weeks ('P56D'): AWS sells blocks starting within 8 weeks, got {_duration_words(value.total_seconds())}")
        return value


def _duration_words(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} seconds"


def _shown(value: Any) -> str:
    return _shorten(value) if isinstance(value, str) else json_kind(value)


class Refill(BaseModel):
    """What a refill run replaces: an instance of request `request_id` that EC2 reclaimed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: StrictStr
    replaces: list[StrictStr] = Field(min_length=1, max_length=MAX_COUNT)
    # The pool the instance was reclaimed from ("market/region/zone/type"): tried last.
    reclaimed_pool: StrictStr | None = None
    # The request's max_lifetime moment, fixed when it was accepted: the replacement is guarded by
    # the same moment, never by a new lifetime counted from the refill.
    expires_at: AwareDatetime | None = None

    @field_validator("request_id")
    @classmethod
    def _execution_name(cls, value: str) -> str:
        if not REQUEST_ID_PATTERN.match(value):
            raise ValueError(f"{_shorten(value)} is not a request id (the execution name of a provisioning run)")
        return value

    @field_validator("replaces")
    @classmethod
    def _instance_ids(cls, value: list[str]) -> list[str]:
        bad = [i for i in value if not INSTANCE_ID_PATTERN.match(i)]
        if bad:
            raise ValueError(f"not EC2 instance ids (i-0123456789abcdef0): {', '.join(map(repr, bad))}")
        return value


class Request(BaseModel):
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
        # pydantic would also take a number of seconds or "HH:MM:SS"; the contract is ISO 8601 only.
        if value is not None and not (isinstance(value, str) and value.startswith("P")):
            shown = _shorten(value) if isinstance(value, str) else json_kind(value)
            raise ValueError(f"must be an ISO 8601 duration such as 'PT30M' or 'PT1H30M', got {shown}")
        return value

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
        if value is not None and not (isinstance(value, str) and value.startswith("P")):
            raise ValueError(f"must be an ISO 8601 duration such as 'PT8H' or 'P2D', got {_shown(value)}")
        return value

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
                f"got {_duration_words(seconds)}"
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
                f"{', '.join(_shorten(i) for i in bad)}"
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
            _check_types(value)
            _check_no_repeats(value)
        return value

    @field_validator("instance_type")
    @classmethod
    def _known_type(cls, value: str | None) -> str | None:
        if value is not None:
            _check_types([value])
        return value

    @field_validator("regions")
    @classmethod
    def _known_regions(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            unknown = [r for r in value if r not in catalog.known_regions()]
            if unknown:
                raise ValueError(f"unknown region(s): {', '.join(map(repr, unknown))}")
            _check_no_repeats(value)
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
        _check_tags(value)
        return value

    @field_validator("model_id")
    @classmethod
    def _hugging_face_repo_id(cls, value: str) -> str:
        if len(value) > MAX_MODEL_ID_LENGTH or ".." in value or not MODEL_ID_PATTERN.fullmatch(value):
            raise ValueError(
                f"{_shorten(value)} is not a Hugging Face model id: give 'owner/name' such as {DEFAULT_MODEL_ID!r} "
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
                f"{_shorten(value)} is not a container image reference: give [registry/]path[:tag][@sha256:digest] "
                f"such as {DEFAULT_IMAGE!r} (the path in lowercase letters, digits and single separators; no '..')"
            )
        return value

    @model_validator(mode="after")
    def _check_combinations(self) -> Request:
        problems: list[tuple[str, str]] = []
        if self.instance_types is not None and self.instance_type is not None:
            problems.append(("instance_type", "give either instance_type or instance_types, not both"))
        problems += self._teardown_and_status_problems()
        problems += self._provision_only_problems()
        problems += self._gang_problems()
        if self.wait_for_capacity is not None and self.action != "provision":
            problems.append(
                ("wait_for_capacity", f"only goes with action 'provision' (this request's action is {self.action!r})")
            )
        problems += self._maintenance_problems()
        if self.max_lifetime is not None and self.action != "provision":
            problems.append(("max_lifetime", f"only goes with action 'provision' (this request's action is {self.action!r})"))
        if self.trigger is not None and self.action != "teardown":
            problems.append(("trigger", f"only goes with action 'teardown' (this request's action is {self.action!r})"))
        problems += self._reservation_problems()
        problems += self._capacity_block_problems()
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

    def _provision_only_problems(self) -> list[tuple[str, str]]:
        """What to launch means nothing to a teardown or a status view: given there, it is a
        request meant for another action, refused rather than silently ignored."""
        if self.action in ("provision", "plan"):
            return []
        given = [name for name in PROVISION_ONLY_FIELDS if name in self.model_fields_set]
        return [
            (name, f"only goes with action 'provision' or 'plan' (this request's action is {self.action!r})")
            for name in given
        ]

    def _gang_problems(self) -> list[tuple[str, str]]:
        """A gang is something a provisioning run places; a teardown or a status view has none."""
        if self.action in ("provision", "plan"):
            return []
        given = [n for n, v in (("placement", self.placement != "any"), ("all_or_nothing", self.all_or_nothing)) if v]
        return [(name, f"only goes with action 'provision' (this request's action is {self.action!r})") for name in given]

    def _reservation_problems(self) -> list[tuple[str, str]]:
        problems: list[tuple[str, str]] = []
        if self.capacity_reservation_ids and self.capacity_reservations == "none":
            problems.append(
                ("capacity_reservation_ids", 'names reservations while "capacity_reservations" is "none": give "open" or "only", or drop the ids')
            )
        if self.capacity_reservations == "only" and "market" in self.model_fields_set and self.market != "on-demand":
            problems.append(
                ("market", f'"capacity_reservations": "only" launches into On-Demand Capacity Reservations alone; drop market {self.market!r}')
            )
        return problems

    def _capacity_block_problems(self) -> list[tuple[str, str]]:
        from gpufill.models.capacity_block_rules import count_problem

        problems: list[tuple[str, str]] = []
        if self.action not in ("provision", "plan"):
            return problems
        if self.market == "capacity-block" and self.capacity_block is None:
            problems.append(
                ("capacity_block", 'market "capacity-block" needs capacity_block: {"max_upfront_usd", "duration_hours", "start_within"}')
            )
        if self.capacity_block is None:
            return problems
        problem = count_problem(self.count)
        if problem:
            problems.append(("count", f"with capacity_block, {problem}"))
        if self.capacity_reservations == "only":
            problems.append(
                ("capacity_block", '"capacity_reservations": "only" launches into reservations alone; drop one or the other')
            )
        if self.maintain:
            problems.append(("capacity_block", "does not go with maintain yet: a refill would run outside the block"))
        if self.placement != "any" or self.all_or_nothing:
            problems.append(("capacity_block", "does not go with a gang (placement other than 'any', or all_or_nothing) yet"))
        return problems

    def _maintenance_problems(self) -> list[tuple[str, str]]:
        problems: list[tuple[str, str]] = []
        if self.maintain and self.action != "provision":
            problems.append(("maintain", f"only goes with action 'provision' (this request's action is {self.action!r})"))
        if self.refill is not None and (self.action != "provision" or not self.maintain):
            problems.append(("refill", "is set by gpufill on the refill runs of a request with maintain: true"))
        if self.maintain and (self.placement != "any" or self.all_or_nothing):
            # A refill run replaces one instance wherever the market has room; it would not keep
            # the gang's AZ or region, nor roll the gang back, so the pair is refused.
            problems.append(("maintain", "does not go with a gang (placement other than 'any', or all_or_nothing) yet"))
        return problems

    def types(self) -> list[str]:
        if self.instance_types is not None:
            return list(self.instance_types)
        return [self.instance_type or DEFAULT_INSTANCE_TYPE]


def _check_types(names: list[str]) -> None:
    """Every type must be one gpufill knows and can run: its AMI and serving image are x86_64 only."""
    known = catalog.known_instance_types()
    problems = []
    for name in names:
        if name not in known:
            problems.append(_unknown_type(name, known))
        elif (arch := catalog.architecture(name)) != SUPPORTED_ARCHITECTURE:
            problems.append(
                f"{name!r} is an {arch} type; gpufill's machine image and serving image are "
                f"{SUPPORTED_ARCHITECTURE} only, so choose an {SUPPORTED_ARCHITECTURE} GPU type such as {DEFAULT_INSTANCE_TYPE!r}"
            )
    if problems:
        raise ValueError("; ".join(problems))


def _unknown_type(name: str, known: tuple[str, ...]) -> str:
    carriers = [t for t in catalog.types_with_gpu(name) if catalog.architecture(t) == SUPPORTED_ARCHITECTURE]
    if carriers:
        # A GPU's name where an instance type goes ("L4", "H100"): say which types carry it.
        listed = ", ".join(f"{t} ({catalog.gpus(t)})" for t in carriers)
        return f"{name!r} is a GPU, not an instance type; the types that carry it (GPUs each): {listed}"
    if not INSTANCE_TYPE_PATTERN.match(name):
        return f"{_shorten(name)} is not an EC2 instance type name such as {DEFAULT_INSTANCE_TYPE!r}"
    runnable = [t for t in known if catalog.architecture(t) == SUPPORTED_ARCHITECTURE]
    close = difflib.get_close_matches(name, runnable, n=1)
    families = dict.fromkeys(t.split(".")[0] for t in runnable)
    hint = f"did you mean {close[0]!r}?" if close else f"gpufill knows {', '.join(families)} types"
    return f"{name!r} is not a GPU instance type gpufill knows: {hint}"


def _check_no_repeats(values: list[str]) -> None:
    repeated = [v for n, v in enumerate(values) if v in values[:n]]
    if repeated:
        raise ValueError(f"lists {', '.join(map(repr, dict.fromkeys(repeated)))} more than once")


def _check_tags(tags: dict[str, str]) -> None:
    """EC2's tag rules, with gpufill's own tags counted in the 50 a resource may carry."""
    problems = []
    if len(tags) > MAX_USER_TAGS:
        problems.append(
            f"{len(tags)} tags, at most {MAX_USER_TAGS}: EC2 allows {EC2_MAX_TAGS} per instance "
            f"and gpufill adds {GPUFILL_TAG_COUNT} of its own"
        )
    for key, value in tags.items():
        if not 1 <= len(key) <= EC2_MAX_TAG_KEY_LENGTH:
            problems.append(f"key {_shorten(key)} is {len(key)} characters; a tag key has 1 to {EC2_MAX_TAG_KEY_LENGTH}")
        elif key.lower().startswith(RESERVED_TAG_PREFIXES):
            problems.append(f"key {key!r}: keys starting with 'gpufill:' or 'aws:' are reserved")
        elif not TAG_TEXT_PATTERN.match(key):
            problems.append(f"key {key!r} {_TAG_CHARACTERS}")
        if len(value) > EC2_MAX_TAG_VALUE_LENGTH:
            problems.append(f"the value of {_shorten(key)} is {len(value)} characters; at most {EC2_MAX_TAG_VALUE_LENGTH}")
        elif not TAG_TEXT_PATTERN.match(value):
            problems.append(f"the value of {_shorten(key)} {_TAG_CHARACTERS}")
    if problems:
        raise ValueError("; ".join(problems))


_TAG_CHARACTERS = "may only hold letters, digits, spaces and + - = . _ : / @"


def _shorten(text: str, limit: int = 40) -> str:
    """Quote a user's value in a message without echoing a whole oversized field back."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "…"


class RequestProblems(ValueError):
    """Several cross-field problems at once, so the user fixes them in one go."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{field}: {text}" for field, text in problems))


class CapacityBlockAsk(BaseModel):
    """capacity_block with its duration in seconds (the run fixes the window's end when it asks)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_upfront_usd: float
    duration_hours: int
    start_within_seconds: int


class ResolvedRequest(BaseModel):
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
    root_volume_gib: int = DEFAULT_ROOT_VOLUME_GIB
    scoring: Scoring = "price-capacity"
    facts: Facts = "warm"
    placement: Placement = "any"
    all_or_nothing: bool = False
    # teardown / status: the provisioning run or the instances to act on (request_id above is this run's own id).
    target_request_id: str | None = None
    instance_ids: list[str] | None = None
    all: bool = False
    approval_timeout_seconds: int = DEFAULT_APPROVAL_TIMEOUT_SECONDS
    requested_by: str | None = None
    # wait_for_capacity's deadline in seconds from the run's start (the run fixes the absolute time),
    # and its backoff when the request set it (None: the deployment's).
    wait_for_capacity_seconds: int | None = None
    wait_first_delay_seconds: int | None = None
    wait_max_delay_seconds: int | None = None
    # 0: the run does not wait for the model servers (serving unknown).
    ready_timeout_seconds: int = DEFAULT_READY_TIMEOUT_SECONDS
    maintain: bool = False
    refill: Refill | None = None
    # max_lifetime in seconds, and the moment the request expires (fixed once, when it is accepted).
    max_lifetime_seconds: int | None = None
    expires_at: str | None = None
    trigger: str | None = None
    capacity_reservations: CapacityReservations = "open"
    capacity_reservation_ids: list[str] | None = None
    capacity_block: CapacityBlockAsk | None = None

    @property
    def owner_id(self) -> str:
        """The request whose instances this run launches: a refill run's are its request's."""
        return self.refill.request_id if self.refill is not None else self.request_id


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


def json_kind(value: Any) -> str:
    """What a value is, in the words of the JSON the user wrote."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    for kind, name in ((str, "a string"), (int, "a number"), (float, "a number"), (list, "a list"), (dict, "an object")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


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
