"""`make bench`: gpufill against the approaches people use today, on the same scarce markets.

Four strategies meet every market: `broker` and `oracle` are policy-level simulators
over the market model; `classic` and `gpufill` run the real state machine on the
local engine, so their state transitions and Lambda invocations are real counts.
"""
