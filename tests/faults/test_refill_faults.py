"""Refills of a maintained request racing its teardown: nothing launched that the approval never saw."""

import threading

from gpufill.local import interruptions
from tests.support.audit import live_instances
from tests.workflow.test_maintain import EAST, REQUEST, WEST, answers, engine, refills


def test_a_reclaim_during_a_teardowns_approval_starts_no_replacement_that_outlives_it():
    with engine([{"at_seconds": 900, "instance": 2}]) as account:
        account.run({**REQUEST, "count": 2}, name="pair")
        second = account.market.launched_instance(2)[2].id
        ended: dict = {}
        teardown = threading.Thread(target=lambda: ended.update(
            run=account.run({"action": "teardown", "request_id": "pair"}, name="end-pair")))
        teardown.start()
        account.wait_for_approval("end-pair")
        account.advance(900)  # EC2 reclaims one of the pair while a person decides
        account.advance(interruptions.SPOT_WARNING_SECONDS)
        account.settle()
        for name in refills(account):
            account.follow(name)
        account.answer_approval("end-pair", "approved")
        teardown.join(60)
        account.settle()
        left = live_instances("pair", regions=(EAST, WEST))
        started = refills(account)
        said = {reason for _, reason in answers(account, second)}
    assert ended["run"].output["status"] == "TERMINATED"
    assert started == [] and said == {"torn-down"}
    assert left == set()


def test_a_refill_waiting_for_capacity_launches_nothing_after_its_request_was_torn_down():
    # The reclaimed instance's pool is the only one; it comes back an hour later.
    market = {"regions": {EAST: {"zones": {"us-east-1a": {"g6.xlarge": {"spot_price": 0.4, "spot": 1}}}}},
              "interruptions": [{"at_seconds": 600, "instance": 1}],
              "restock": [{"at_seconds": 4200, "zone": "us-east-1a", "type": "g6.xlarge", "spot": 4}]}
    from gpufill.local.engine import LocalEngine
    from gpufill.local.scenario import MarketScenario

    with LocalEngine(MarketScenario.model_validate(market), regions_config={"regions": [EAST]}) as account:
        account.run({**REQUEST, "wait_for_capacity": {"deadline": "PT6H"}}, name="kept")
        account.advance(600)
        account.settle()
        [refill] = refills(account)
        account.at(1800, lambda: account.run({"action": "teardown", "request_id": "kept"}, name="end-kept",
                                             decision="approved"))
        waited = account.follow(refill)
        left = live_instances("kept", regions=(EAST,))
    assert waited.status == "SUCCEEDED", (waited.error, waited.cause)
    assert waited.output["status"] == "WAIT_ENDED" and waited.output["launched"] == 0
    assert left == set()
