"""What the fill's moves read of a request (policy/fill.py, policy/fleet_moves.py, policy/gang.py).

A launch step reads EC2's answers by these four rules alone (policy/launch_step.py decides them
with the call), so the read cannot depend on anything else the request says. A ResolvedRequest
has them too, so the other steps (PrepareRegion, the gang's rollback) pass the request itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class FillRules(Protocol):
    """How the fill moves after an answer: the launch mode, the largest batch, the gang's place,
    and whether an incomplete gang is rolled back."""

    @property
    def launch_mode(self) -> str: ...

    @property
    def batch_max(self) -> int: ...

    @property
    def placement(self) -> str: ...

    @property
    def all_or_nothing(self) -> bool: ...


@dataclass(frozen=True)
class Rules:
    """A request's FillRules, kept with the step's call."""

    launch_mode: str
    batch_max: int
    placement: str
    all_or_nothing: bool


def of(request: FillRules) -> Rules:
    return Rules(
        launch_mode=request.launch_mode,
        batch_max=request.batch_max,
        placement=request.placement,
        all_or_nothing=request.all_or_nothing,
    )
