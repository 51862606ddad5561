"""AWS's rules for what a Capacity Block for ML may be (EC2 User Guide, "Capacity Blocks for ML"),
checked by the request model and read by the pick in policy/capacity_blocks.py:
- a block holds 1, 2, 4, 8, 16, 32 or 64 instances of one type in one Availability Zone;
- it lasts 1 to 14 days in 1-day steps, then 7-day steps up to 182 days (always whole days);
- it starts within 8 weeks.
"""

from __future__ import annotations

from datetime import timedelta

BLOCK_COUNTS = (1, 2, 4, 8, 16, 32, 64)
HOURS_PER_DAY = 24
DAILY_STEPS_UP_TO_DAYS = 14
WEEKLY_STEPS_UP_TO_DAYS = 182
MAX_START_WITHIN = timedelta(weeks=8)


def allowed_durations_hours() -> tuple[int, ...]:
    """Every duration AWS sells a block for, in hours: 24..336 by 24, then 504..4368 by 168."""
    daily = range(1, DAILY_STEPS_UP_TO_DAYS + 1)
    weekly = range(DAILY_STEPS_UP_TO_DAYS + 7, WEEKLY_STEPS_UP_TO_DAYS + 1, 7)
    return tuple(d * HOURS_PER_DAY for d in (*daily, *weekly))


ALLOWED_DURATIONS_HOURS = allowed_durations_hours()


def duration_problem(hours: int) -> str | None:
    """Why AWS would not sell a block of this many hours, or None."""
    if hours in ALLOWED_DURATIONS_HOURS:
        return None
    if hours % HOURS_PER_DAY:
        return f"must be whole days (a multiple of 24 hours) from 24 to {ALLOWED_DURATIONS_HOURS[-1]}, got {hours}"
    days = hours // HOURS_PER_DAY
    if 1 <= days <= WEEKLY_STEPS_UP_TO_DAYS:
        below = max(h for h in ALLOWED_DURATIONS_HOURS if h < hours)
        above = min(h for h in ALLOWED_DURATIONS_HOURS if h > hours)
        return (
            f"{hours} hours ({days} days) is not a Capacity Block duration: past 14 days blocks come in 7-day steps "
            f"(the nearest are {below} and {above})"
        )
    return f"must be from 24 (1 day) to {ALLOWED_DURATIONS_HOURS[-1]} ({WEEKLY_STEPS_UP_TO_DAYS} days), got {hours}"


def count_problem(count: int) -> str | None:
    if count in BLOCK_COUNTS:
        return None
    return f"a Capacity Block holds {', '.join(map(str, BLOCK_COUNTS[:-1]))} or {BLOCK_COUNTS[-1]} instances, got {count}"
