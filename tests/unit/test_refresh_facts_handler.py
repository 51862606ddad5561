"""The RefreshFacts handler (handlers/refresh_facts.py): it refreshes what the policy picks with
ScoreRegion's and PrepareRegion's own look-ups, skips a region it cannot reach, and reads its
interval from the schedule's Input. AWS is replaced by recorders."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from gpufill.adapters import clock, network
from gpufill.adapters import warm_facts as store
from gpufill.constants import FACTS_REFRESH_DEFAULT_MINUTES, FACTS_REFRESH_MAX_MINUTES, FACTS_REFRESH_MIN_MINUTES
from gpufill.handlers import refresh_facts
from gpufill.handlers.observability import metrics
from gpufill.models.run import RegionFacts, TypeFacts
from gpufill.policy.facts_refresh import Usage
from gpufill.policy.warm_facts import PreparedRegion

NOW = 1_800_000_000.0


class Context:
    function_name = "RefreshFacts"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:gpufill-dev-RefreshFacts"
    memory_limit_in_mb = 512
    aws_request_id = "req"
    log_group_name = "/aws/lambda/RefreshFacts"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 120_000


@pytest.fixture
def aws(monkeypatch):
    done: dict[str, list] = {"scored": [], "saved": [], "prepared": []}
    usage = Usage(
        scored={("us-east-1", "g6.xlarge"): NOW - 60, ("us-west-2", "g6.xlarge"): NOW - 60, ("eu-west-1", "g6.xlarge"): NOW - 90_000},
        zone_ids={("us-west-2", "g6.xlarge"): NOW - 60},
        launched={"us-east-1": NOW - 60, "us-west-2": NOW - 60},
        zones={"us-east-1": ("us-east-1a",), "us-west-2": ("us-west-2a",)},
    )
    monkeypatch.setattr(clock, "epoch", lambda: NOW)
    monkeypatch.setattr(store, "load_used", lambda: usage)
    monkeypatch.setattr(store, "load_scored", lambda regions, types: {})
    monkeypatch.setattr(store, "load_prepared", lambda region: None)
    monkeypatch.setattr(store, "save_scored", lambda facts, **kw: done["saved"].append((facts.region, kw)))

    def region_facts(region, types, *, want_zone_ids):
        done["scored"].append((region, types, want_zone_ids))
        return RegionFacts(region=region, types=[TypeFacts(instance_type=t) for t in types])

    def look_up_launch(region, zones, *, fresh=False):
        if region == "us-west-2":
            raise network.NetworkSetupError("no subnet to launch into in us-west-2")
        done["prepared"].append((region, zones))
        return PreparedRegion(region=region, image_id="ami-1", snapshot_gib=None, security_group_id="sg-1",
                              subnets={"us-east-1a": "subnet-1"}, zones=tuple(zones), written_at=NOW)

    monkeypatch.setattr(refresh_facts, "region_facts", region_facts)
    monkeypatch.setattr(refresh_facts, "look_up_launch", look_up_launch)
    yield done
    metrics.clear_metrics()


def test_a_pass_refreshes_what_runs_used_lately_and_skips_what_it_cannot_reach(aws):
    answer = refresh_facts.handler({"scheduler_execution": "e-1", "every_seconds": 300}, Context())
    # eu-west-1 was last used more than a day ago: not asked about.
    assert aws["scored"] == [("us-east-1", ["g6.xlarge"], False), ("us-west-2", ["g6.xlarge"], True)]
    assert aws["saved"] == [("us-east-1", {"written_at": NOW, "zone_ids": False}), ("us-west-2", {"written_at": NOW, "zone_ids": True})]
    assert aws["prepared"] == [("us-east-1", ["us-east-1a"])]
    assert answer["scoring"] == [{"region": "us-east-1", "instance_types": ["g6.xlarge"]},
                                 {"region": "us-west-2", "instance_types": ["g6.xlarge"]}]
    assert answer["launch"] == [{"region": "us-east-1"}]
    assert answer["skipped"] == [{"region": "us-west-2", "kind": "launch", "reason": "NetworkSetupError: no subnet to launch into in us-west-2"}]


def test_a_region_dropped_or_throttled_is_left_to_the_next_pass(aws, monkeypatch):
    def region_facts(region, types, *, want_zone_ids):
        if region == "us-east-1":
            raise ClientError({"Error": {"Code": "RequestLimitExceeded", "Message": "slow down"}}, "DescribeSpotPriceHistory")
        return RegionFacts(region=region, error="AuthFailure: opted out")

    monkeypatch.setattr(refresh_facts, "region_facts", region_facts)
    answer = refresh_facts.handler({}, Context())
    assert answer["scoring"] == [] and aws["saved"] == []
    assert [(s["region"], s["kind"]) for s in answer["skipped"]] == [("us-east-1", "scoring"), ("us-west-2", "scoring"), ("us-west-2", "launch")]


@pytest.mark.parametrize(("event", "seconds"), [
    ({"every_seconds": 120}, 120.0),
    ({}, FACTS_REFRESH_DEFAULT_MINUTES * 60.0),
    ({"every_seconds": "300"}, FACTS_REFRESH_DEFAULT_MINUTES * 60.0),
    ({"every_seconds": True}, FACTS_REFRESH_DEFAULT_MINUTES * 60.0),
    ({"every_seconds": 5}, FACTS_REFRESH_MIN_MINUTES * 60.0),
    ({"every_seconds": 86_400}, FACTS_REFRESH_MAX_MINUTES * 60.0),
])
def test_the_interval_is_the_schedules_within_what_the_setting_allows(event, seconds):
    assert refresh_facts._every_seconds(event) == seconds
