"""A refill racing a teardown of everything or of instance ids: no replacement outlives the
approved teardown. The refill runs whole in the window where the teardown has listed what it
found and not yet marked the request (the two are separate Lambdas on AWS and can interleave)."""

from __future__ import annotations

from unittest import mock

import pytest

from gpufill import constants
from gpufill.adapters import instances_table, inventory
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.support import zone
from tests.support.audit import live_instances, table_items

EAST = "us-east-1"
MARKET = {"regions": {EAST: {"zones": {"us-east-1a": zone(0.40, spot=4), "us-east-1b": zone(0.70, spot=4)}}},
          "interruptions": [{"at_seconds": 600, "instance": 1}]}
REQUEST = {"instance_type": "g6.xlarge", "count": 1, "maintain": True, "regions": [EAST]}


def ever_launched(request_id: str) -> set[str]:
    """Every instance EC2 ever launched for the request, whatever its state now."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    return {i.id for i in ec2_backends[DEFAULT_ACCOUNT_ID][EAST].all_instances()
            if {t["key"]: t["value"] for t in i.get_tags()}.get(constants.TAG_REQUEST_ID) == request_id}


def refill_while_listing(account: LocalEngine, target: str):
    """Run the reclaim and its whole refill right after the teardown's first read of what it ends."""
    module, name = (inventory, "gather") if target == "all" else (instances_table, "records_by_ids")
    original, armed = getattr(module, name), [True]

    def read_then_refill(*args, **kwargs):
        found = original(*args, **kwargs)
        if armed and armed.pop():
            with account.elsewhere():
                account.advance(600)
                account.settle()
                for refill in [n for n in account.executions() if constants.REFILL_NAME_INFIX in n]:
                    account.follow(refill)
        return found

    return mock.patch.object(module, name, read_then_refill)


@pytest.mark.parametrize("target", ["all", "ids"])
def test_a_refill_racing_a_teardown_of_everything_or_of_ids_leaves_nothing_running(target):
    with LocalEngine(MarketScenario.model_validate(MARKET), regions_config={"regions": [EAST]}) as account:
        [old] = account.run(REQUEST, name="serve").output["instances"]
        ask = {"action": "teardown", "all": True} if target == "all" else {"action": "teardown", "instance_ids": [old["instance_id"]]}
        with refill_while_listing(account, target):
            teardown = account.run(ask, name=f"end-{target}", decision="approved")
        refills = [account.follow(n) for n in account.executions() if constants.REFILL_NAME_INFIX in n]
        assert refills, "no refill ran inside the window"
        still = live_instances("serve", regions=[EAST])
        recorded = {i["instance_id"] for i in table_items("serve")}
        launched = ever_launched("serve")
    assert teardown.output["status"] == "TERMINATED", teardown.output
    assert not still  # nothing of the request outlives the approved teardown
    assert launched == recorded  # and every instance it ever launched was recorded once
    if target == "all":  # the pause came first: the refill stopped before it launched
        assert [r.output["status"] for r in refills] == ["REFILL_STOPPED"]
    else:  # the refill recorded its replacement before the mark: the teardown lists it with the id given
        [refill] = refills
        assert refill.output["status"] == "FULFILLED"
        [new] = [i["instance_id"] for i in refill.output["instances"]]
        assert new in {i["instance_id"] for i in teardown.output["instances"]}
