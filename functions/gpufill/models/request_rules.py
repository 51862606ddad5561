"""The rules between a request's fields (docs/request.md): which fields go with which action, and
which options go together. Request (models/request.py) checks them all at once, so the user fixes
every problem in one go."""

from __future__ import annotations

from gpufill.models.capacity_block_rules import count_problem

# What to launch and where it serves: meaningful to provision and plan only. (`regions` is not
# among them: a teardown or status searches the regions it is given.)
PROVISION_ONLY_FIELDS = (
    "instance_types", "instance_type", "count", "batch_max", "launch_mode", "market", "on_demand_strategy",
    "origin_region", "tags", "model_id", "image", "root_volume_gib", "scoring", "facts",
    "capacity_reservations", "capacity_reservation_ids", "capacity_block",
)


class RequestProblems(ValueError):
    """Several cross-field problems at once, so the user fixes them in one go."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{field}: {text}" for field, text in problems))


class RequestRules:
    """The cross-field rules, as methods of Request: each returns the (field, problem) pairs it finds."""

    def combination_problems(self) -> list[tuple[str, str]]:
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
        return problems

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
