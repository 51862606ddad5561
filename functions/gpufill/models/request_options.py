"""The objects a request holds (docs/request.md), each checked on its own: `wait_for_capacity`,
`capacity_block` and a refill run's `refill`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator, model_validator

from gpufill.constants import (
    MAX_CAPACITY_BLOCK_UPFRONT_USD,
    MAX_COUNT,
    MAX_WAIT_FOR_CAPACITY_SECONDS,
    WAIT_LONGEST_DELAY_SECONDS,
    WAIT_MIN_DELAY_SECONDS,
)
from gpufill.models.capacity_block_rules import MAX_START_WITHIN, duration_problem
from gpufill.models.request_values import (
    INSTANCE_ID_PATTERN,
    REQUEST_ID_PATTERN,
    duration_words,
    iso_duration,
    json_kind,
    shorten,
)


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
        return iso_duration(value, "'PT6H' or 'P2D'")

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
        problem = duration_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("start_within", mode="before")
    @classmethod
    def _iso_duration(cls, value: Any) -> Any:
        return iso_duration(value, "'P14D' or 'P2W'")

    @field_validator("start_within")
    @classmethod
    def _within_eight_weeks(cls, value: timedelta) -> timedelta:
        if value < timedelta(hours=1):
            raise ValueError("must be at least an hour ('PT1H'): a block starts at a whole hour at the earliest")
        if value > MAX_START_WITHIN:
            raise ValueError(f"may be at most 8 weeks ('P56D'): AWS sells blocks starting within 8 weeks, got {duration_words(value.total_seconds())}")
        return value


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
            raise ValueError(f"{shorten(value)} is not a request id (the execution name of a provisioning run)")
        return value

    @field_validator("replaces")
    @classmethod
    def _instance_ids(cls, value: list[str]) -> list[str]:
        bad = [i for i in value if not INSTANCE_ID_PATTERN.match(i)]
        if bad:
            raise ValueError(f"not EC2 instance ids (i-0123456789abcdef0): {', '.join(map(repr, bad))}")
        return value
