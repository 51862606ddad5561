"""Capacity errors are shared across executions: the next run tries a pool that just said "no capacity" last."""

from unittest import mock

from gpufill.adapters import capacity_cache
from tests.support import tried, zone

MARKET = {"regions": {"us-west-2": {"zones": {
    "us-west-2a": zone(0.40, spot=0), "us-west-2b": zone(0.42, spot=0), "us-west-2c": zone(0.45, spot=20)}}}}
# The runs follow each other within the cache's 180 s: none waits for its model servers
# (ready_timeout's default would let the modelled clock pass the TTL between them).
REQUEST = {"count": 2, "regions": ["us-west-2"], "ready_timeout": "PT0S", "launch_mode": "partial"}


def test_second_run_tries_what_the_first_just_learned_last(local_account):
    with local_account(MARKET) as engine:
        first = engine.run(REQUEST, name="first")
        second = engine.run(REQUEST, name="second")
        plan = engine.run({"count": 2, "regions": ["us-west-2"], "action": "plan"}, name="plan-after").output
    assert [z for z, *_ in tried(first)] == ["us-west-2a", "us-west-2b", "us-west-2c"]
    assert tried(second) == [("us-west-2c", 2, 2, "launched")]
    assert second.metrics["ec2_calls"]["RunInstances"] == 1
    assert [p["availability_zone"] for p in plan["pools"]] == ["us-west-2c", "us-west-2a", "us-west-2b"]
    assert all("tried last" in p["note"] for p in plan["pools"][1:])


def test_cached_pools_are_still_tried_last_and_the_attempt_says_why(local_account):
    market = {"regions": {"us-west-2": {"zones": {"us-west-2a": zone(0.40, spot=0), "us-west-2b": zone(0.42, spot=1)}}}}
    with local_account(market) as engine:
        engine.run({"count": 1, "regions": ["us-west-2"], "ready_timeout": "PT0S"}, name="learns")  # 2a full, 2b gives its one
        engine.market._stock[("us-west-2", "us-west-2a", "g6.xlarge", "spot")] = 5  # capacity came back
        later = engine.run({"count": 1, "regions": ["us-west-2"], "ready_timeout": "PT0S"}, name="later")
    attempts = later.output["attempts"]
    assert [(a["availability_zone"], a["outcome"]) for a in attempts] == [("us-west-2b", "capacity"), ("us-west-2a", "launched")]
    assert "another run; tried last" in attempts[1]["note"]


def test_entries_expire_after_the_ttl(local_account, monkeypatch):
    monkeypatch.setenv("CAPACITY_CACHE_SECONDS", "180")
    with local_account(MARKET):
        capacity_cache.remember_full("spot/us-west-2/us-west-2a/g6.xlarge", request_id="r", reason="x", now=1000)
        assert capacity_cache.recently_full(["spot/us-west-2/us-west-2a/g6.xlarge"], now=1179) == {
            "spot/us-west-2/us-west-2a/g6.xlarge": 1000}
        assert capacity_cache.recently_full(["spot/us-west-2/us-west-2a/g6.xlarge"], now=1181) == {}


def test_exact_mode_caches_a_pool_only_when_even_one_instance_is_refused(local_account):
    market = {"regions": {"us-west-2": {"zones": {"us-west-2a": zone(0.40, spot=1), "us-west-2b": zone(0.42, spot=9)}}}}
    with local_account(market) as engine:
        engine.run({"count": 2, "launch_mode": "exact", "regions": ["us-west-2"], "ready_timeout": "PT0S"}, name="exact")
        cached = capacity_cache.recently_full(["spot/us-west-2/us-west-2a/g6.xlarge", "spot/us-west-2/us-west-2b/g6.xlarge"])
    # 2a: batch 2 refused (not cached), batch 1 launched, batch 1 refused -> cached; 2b filled the rest.
    assert list(cached) == ["spot/us-west-2/us-west-2a/g6.xlarge"]


def test_a_broken_cache_never_fails_a_run(local_account):
    with local_account(MARKET) as engine, mock.patch.object(capacity_cache, "client", side_effect=RuntimeError("down")):
        execution = engine.run(REQUEST, name="no-cache")
    assert execution.output["status"] == "FULFILLED"


def test_ttl_zero_turns_the_cache_off(local_account, monkeypatch):
    monkeypatch.setenv("CAPACITY_CACHE_SECONDS", "0")
    with local_account(MARKET) as engine:
        engine.run(REQUEST, name="a")
        again = engine.run(REQUEST, name="b")
    assert [z for z, *_ in tried(again)] == ["us-west-2a", "us-west-2b", "us-west-2c"]
