"""Paired comparisons: gpufill against one baseline on the same markets, case by case.

A median of per-case ratios hides where the money and the calls go; these figures do not:
the sums over the cases, the mean per-case difference, and how many cases went each way,
with a two-sided exact sign test on those (ties dropped, as the test prescribes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb


def sign_test(fewer: int, more: int) -> float:
    """Two-sided exact sign test: the chance, if either side were as likely to win each untied
    case, of a split at least as uneven as `fewer` against `more`. 1.0 with no untied case."""
    n = fewer + more
    if n == 0:
        return 1.0
    k = min(fewer, more)
    tail = sum(comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class Paired:
    """gpufill ("mine") against a baseline ("theirs") on the cases both ran, for one figure."""

    cases: int
    mine_total: float
    theirs_total: float
    mean_difference: float  # mine - theirs, per case
    lower: int  # cases where mine is lower (fewer calls, cheaper, faster)
    higher: int
    equal: int

    @property
    def p_value(self) -> float:
        return sign_test(self.lower, self.higher)

    @property
    def ratio(self) -> float | None:
        return self.mine_total / self.theirs_total if self.theirs_total else None

    def text(self, fmt: str = "{:.1f}") -> str:
        f = fmt.format
        return (
            f"{f(self.mine_total)} vs {f(self.theirs_total)}, mean difference {self.mean_difference:+.3g} per case; "
            f"lower on {self.lower}, higher on {self.higher}, equal on {self.equal} (sign test p = {self.p_value:.2g})"
        )


def paired(pairs: Sequence[tuple[float, float]], tolerance: float = 1e-9) -> Paired | None:
    """(mine, theirs) per case -> the paired figures; None for no case."""
    if not pairs:
        return None
    lower = sum(1 for a, b in pairs if a < b - tolerance)
    higher = sum(1 for a, b in pairs if a > b + tolerance)
    return Paired(
        cases=len(pairs),
        mine_total=sum(a for a, _ in pairs),
        theirs_total=sum(b for _, b in pairs),
        mean_difference=sum(a - b for a, b in pairs) / len(pairs),
        lower=lower,
        higher=higher,
        equal=len(pairs) - lower - higher,
    )
