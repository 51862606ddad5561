"""The request with every default resolved (models/request.py's `normalise` makes it): what every
step of the workflow reads."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from gpufill.bootstrap.user_data import DEFAULT_IMAGE, DEFAULT_MODEL_ID
from gpufill.constants import DEFAULT_APPROVAL_TIMEOUT_SECONDS, DEFAULT_READY_TIMEOUT_SECONDS, DEFAULT_ROOT_VOLUME_GIB
from gpufill.models.request_options import Refill
from gpufill.models.request_values import Action, CapacityReservations, LaunchMode, Market, OnDemandStrategy, Placement, Scoring, Facts


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
