"""What PrepareRegion and LaunchBatch do at the end of every step: log its attempts, explain a stop."""

from __future__ import annotations

from gpufill.adapters import run_store
from gpufill.models.request import ProvisionRequest
from gpufill.models.run import MarketName, PlanRef, Run
from gpufill.policy.exhaustion import exhaustion_cause, no_reservation_room_cause, rejection_cause


def finish_step(run: Run, request: ProvisionRequest, market: MarketName, plan: PlanRef | None = None) -> Run:
    if run.step_attempts:
        run_store.save_attempts(request.request_id, run.step_attempts)
    if run.next == "exhausted":
        attempts = run_store.load_attempts(request.request_id, run.attempts_total)
        if request.capacity_reservations == "only":
            seen = plan.reservations if plan is not None else []
            return run.model_copy(update={"cause": no_reservation_room_cause(run, attempts, request, seen)})
        return run.model_copy(update={"cause": exhaustion_cause(run, attempts, request, market)})
    if run.next == "rejected":
        return run.model_copy(update={"cause": rejection_cause(run, request)})
    return run
