"""EC2's eventual consistency after create: what gpufill has just created (the launch template,
its version, the instance security group, a cluster placement group) is unknown for a moment to
the call that names it. The call is sent again with the same ClientToken; only a resource that
stays unknown past the bound sends the run elsewhere, saying so."""

from __future__ import annotations

import pytest
from moto.core import DEFAULT_ACCOUNT_ID

from gpufill import constants
from gpufill.adapters import visibility
from tests.support.audit import EAST, REQUEST, WEST, assert_exactly_once

FLEET = {**REQUEST, "launch_mode": "fleet"}


def fleets_by_token(request_id: str) -> dict[str, set[str]]:
    """Launch token -> the fleets whose instances carry it, read from EC2's own tags."""
    from moto.ec2.models import ec2_backends

    found: dict[str, set[str]] = {}
    for region in (WEST, EAST):
        for instance in ec2_backends[DEFAULT_ACCOUNT_ID][region].all_instances():
            tags = {t["key"]: t["value"] for t in instance.get_tags()}
            if tags.get(constants.TAG_REQUEST_ID) == request_id:
                found.setdefault(tags[constants.TAG_LAUNCH_TOKEN], set()).add(tags.get("aws:ec2:fleet-id"))
    return found


def regions_of(execution) -> set[str]:
    return {i["region"] for i in execution.output["instances"]}


@pytest.mark.parametrize("kind", ["launch-template-version", "launch-template"])
def test_a_fleet_whose_template_is_not_visible_yet_fills_the_region_with_one_fleet_per_token(account, kind):
    with account() as engine:
        engine.faults.not_visible(kind, calls=2, region=WEST)
        execution = engine.run(FLEET, name=f"lagging-{kind}")
        seen = assert_exactly_once(engine, execution, launched=4)
        by_token = fleets_by_token(execution.name)
    assert execution.output["status"] == "FULFILLED"
    assert regions_of(execution) == {WEST} and len(seen.in_ec2) == 4
    assert all(len(fleets) == 1 for fleets in by_token.values()) and len(by_token) == 1
    assert engine.faults.injected[f"visibility:{kind}"] == 2


def test_without_the_retry_a_version_not_visible_yet_would_have_left_the_region(account, monkeypatch):
    monkeypatch.setattr(visibility, "PAUSES", ())
    with account() as engine:
        engine.faults.not_visible("launch-template-version", calls=2, region=WEST)
        execution = engine.run(FLEET, name="lagging-no-retry")
        assert_exactly_once(engine, execution, launched=4)
    assert regions_of(execution) == {EAST}


def test_the_instance_security_group_not_visible_yet_is_waited_for_on_the_runinstances_path(account):
    with account() as engine:
        engine.faults.not_visible("security-group", calls=3, region=WEST)
        execution = engine.run(REQUEST, name="lagging-group")
        assert_exactly_once(engine, execution, launched=4)
    assert execution.output["status"] == "FULFILLED"
    assert regions_of(execution) == {WEST}
    assert [a["outcome"] for a in execution.output["attempts"]] == ["launched", "launched"]
    assert engine.faults.injected["visibility:security-group"] == 3


def test_without_the_retry_the_security_group_not_visible_yet_would_have_left_the_region(account, monkeypatch):
    monkeypatch.setattr(visibility, "PAUSES", ())
    with account() as engine:
        engine.faults.not_visible("security-group", calls=2, region=WEST)
        execution = engine.run(REQUEST, name="lagging-group-no-retry")
        assert_exactly_once(engine, execution, launched=4)
    assert regions_of(execution) == {EAST}


def test_a_version_that_stays_unknown_past_the_bound_sends_the_run_on_saying_why(account):
    with account() as engine:
        engine.faults.not_visible("launch-template-version", calls=50, region=WEST)
        execution = engine.run(FLEET, name="lagging-for-good")
        assert_exactly_once(engine, execution, launched=4)
    assert regions_of(execution) == {EAST}
    [west] = [a for a in execution.output["attempts"] if a["region"] == WEST]
    assert west["reason"] == "InvalidLaunchTemplateId.VersionNotFound" and west["outcome"] == "throttled"
    assert "still unknown after 5 tries over 7.5 s" in west["note"]
    assert engine.faults.injected["visibility:launch-template-version"] == 5
