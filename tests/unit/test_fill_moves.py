"""The fill loop's single moves: which pool comes next, with what batch, and what the run keeps when a market ends."""

import pytest

from gpufill.models.request import Request, normalise
from gpufill.models.run import Attempt, Instance, LaunchResult, Pool, RegionLaunch, Run
from gpufill.policy import fill


def request(**fields):
    return normalise(Request(**{"count": 8, "batch_max": 4, "launch_mode": "partial", **fields}), request_id="f", default_regions=["us-west-2"],
                     home_region="us-east-1")


def pools(*places, market="spot", itype="g6.xlarge"):
    """Pools as "region/zone-letter"."""
    return [Pool(region=p.split("/")[0], availability_zone=p.replace("/", ""), instance_type=itype, market=market)
            for p in places]


def entered(run, region):
    return fill.enter_region(run, RegionLaunch(region=region, image_id="ami-1", root_volume_gib=200))


def launched(n, pool):
    return LaunchResult(outcome="launched", instances=[
        Instance(instance_id=f"i-{pool.availability_zone}-{k}", region=pool.region, availability_zone=pool.availability_zone,
                 instance_type=pool.instance_type, market=pool.market, hourly_price=0.25) for k in range(n)])


QUOTA = LaunchResult(outcome="quota", reason="MaxSpotInstanceCountExceeded")
CAPACITY = LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity")


def test_at_the_end_of_spot_the_run_rewinds_with_nothing_blocked_and_no_region_entered():
    """The spot -> on-demand switch: a region closed by a spot quota must be open again for
    on-demand, the cursor back at the top, the batch whole again, and the next region prepared."""
    spot = pools("us-west-2/a", "us-east-1/a")
    req = request(launch_mode="exact")
    run = entered(fill.start(req), "us-west-2").model_copy(update={"batch": 1})
    run = fill.after_attempt(run, spot, QUOTA, req)  # closes spot G quota in us-west-2
    assert (run.cursor, run.next, run.blocked) == (1, "prepare", ["spot/us-west-2/G and VT"])
    run = entered(run, "us-east-1")
    run = fill.after_attempt(run, spot, CAPACITY, req)  # exact mode halves 4 -> 2
    run = fill.after_attempt(run, spot, CAPACITY, req)  # -> 1
    run = fill.after_attempt(run, spot, CAPACITY, req)  # batch 1: the pool is empty, and the last one
    assert (run.next, run.cursor, run.blocked, run.launch, run.batch) == ("exhausted", 0, [], None, 4)
    # The on-demand pools begin with a region to prepare, even the one spot had entered last.
    on_demand = pools("us-east-1/a", "us-west-2/a", market="on-demand")
    assert (fill.prepare(run, on_demand, req).next, fill.prepare(run, on_demand, req).cursor) == ("prepare", 0)


def test_the_rewound_batch_is_what_remains_when_less_than_batch_max_does():
    req = request(count=3, launch_mode="exact")
    spot = pools("us-west-2/a")
    run = entered(fill.start(req), "us-west-2")
    run = fill.after_attempt(run, spot, launched(2, spot[0]), req)
    assert (run.next, run.batch, run.remaining) == ("launch", 1, 1)
    run = fill.after_attempt(run, spot, CAPACITY, req)
    assert (run.next, run.batch, run.cursor) == ("exhausted", 1, 0)


def test_a_partial_answer_short_of_the_batch_moves_on_with_a_fresh_batch():
    req = request(count=8)
    spot = pools("us-west-2/a", "us-west-2/b")
    run = fill.after_attempt(entered(fill.start(req), "us-west-2"), spot, launched(3, spot[0]), req)
    assert (run.cursor, run.next, run.batch, run.launched, run.remaining) == (1, "launch", 4, 3, 5)
    assert run.hourly_cost == 0.75


def test_a_full_answer_asks_the_same_pool_again_for_no_more_than_remains():
    req = request(count=6)
    spot = pools("us-west-2/a", "us-west-2/b")
    run = fill.after_attempt(entered(fill.start(req), "us-west-2"), spot, launched(4, spot[0]), req)
    assert (run.cursor, run.next, run.batch, run.remaining) == (0, "launch", 2, 2)
    run = fill.after_attempt(run, spot, launched(2, spot[0]), req)
    assert (run.next, run.launched, run.remaining) == ("done", 6, 0)


def test_ec2s_message_is_kept_with_an_error_attempt_only_and_cut_at_300_characters():
    req = request()
    pool = Pool(region="us-west-2", availability_zone="us-west-2a", instance_type="g6.xlarge", market="spot",
                note="scored B")
    run = entered(fill.start(req), "us-west-2")
    error = fill.after_attempt(run, [pool], LaunchResult(outcome="error", reason="InvalidParameterValue", message="m" * 400), req)
    assert error.step_attempts[-1].note == "m" * 300
    capacity = fill.after_attempt(run, [pool], LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity",
                                                             message="We currently do not have sufficient capacity"), req)
    assert capacity.step_attempts[-1].note == "scored B"
    noted = fill.after_attempt(run, [pool], LaunchResult(outcome="error", reason="NoSubnet", message="m", note="no subnet"), req)
    assert noted.step_attempts[-1].note == "no subnet"


def test_ec2s_message_is_kept_for_a_resource_it_did_not_show_in_time_but_not_for_other_busy_answers():
    req = request()
    pool = Pool(region="us-west-2", availability_zone="us-west-2a", instance_type="g6.xlarge", market="spot", note="scored B")
    run = entered(fill.start(req), "us-west-2")
    unseen = LaunchResult(outcome="throttled", reason="InvalidGroup.NotFound", message="The security group 'sg-1' does not exist")
    assert fill.after_attempt(run, [pool], unseen, req).step_attempts[-1].note == "The security group 'sg-1' does not exist"
    busy = LaunchResult(outcome="throttled", reason="RequestLimitExceeded", message="Request limit exceeded.")
    assert fill.after_attempt(run, [pool], busy, req).step_attempts[-1].note == "scored B"


def test_a_step_begins_with_no_attempts_of_its_own():
    attempt = Attempt(region="us-west-2", availability_zone="us-west-2a", instance_type="g6.xlarge", market="spot",
                      batch=1, launched=0, outcome="capacity")
    run = Run(batch=1, remaining=1, attempts_total=7, step_attempts=[attempt])
    assert (fill.begin_step(run).step_attempts, fill.begin_step(run).attempts_total) == ([], 7)


@pytest.mark.parametrize(("outcome", "mode", "batch", "empty"), [
    ("capacity", "partial", 4, True),   # MinCount=1 failed: not even one instance
    ("capacity", "exact", 4, False),    # only the batch was too big
    ("capacity", "exact", 2, False),
    ("capacity", "exact", 1, True),
    ("quota", "partial", 1, False),
    ("quota", "exact", 1, False),
    ("launched", "partial", 1, False),
    ("error", "exact", 1, False),
])
def test_only_a_capacity_answer_that_no_smaller_batch_could_avoid_marks_the_pool_full(outcome, mode, batch, empty):
    result = LaunchResult(outcome=outcome, reason="x")
    assert fill.pool_found_empty(batch, result, request(launch_mode=mode)) is empty


def test_a_region_entered_again_after_a_stale_ami_is_prepared_again():
    req = request()
    spot = pools("us-west-2/a", "us-west-2/b")
    stale = entered(fill.start(req), "us-west-2").model_copy(update={"next": "refresh"})
    again = fill.prepare(stale, spot, req)
    assert (again.next, again.cursor, again.launch) == ("prepare", 0, stale.launch)


def test_a_waiting_run_keeps_each_region_s_launch_parameters_for_its_later_tries_and_only_it():
    from gpufill.policy import waiting

    waits = fill.start(request()).model_copy(update={"wait": waiting.begin(3600, 0.0)})
    west = entered(waits, "us-west-2")
    east = fill.enter_region(west, RegionLaunch(region="us-east-1", image_id="ami-2", root_volume_gib=200))
    # Entering a region again replaces its parameters (a stale image resolved afresh) and keeps the others.
    fresh = RegionLaunch(region="us-west-2", image_id="ami-3", root_volume_gib=200, ami_refreshed=True)
    again = fill.enter_region(east, fresh)
    assert [(p.region, p.image_id) for p in again.prepared] == [("us-east-1", "ami-2"), ("us-west-2", "ami-3")]
    # A later try enters with them as a first entry would: its image may be resolved again once more.
    assert fill.prepared_launch(again, "us-west-2") == fresh.model_copy(update={"ami_refreshed": False})
    assert fill.prepared_launch(again, "eu-west-1") is None
    # A run that does not wait ends with its try: it keeps nothing.
    assert entered(fill.start(request()), "us-west-2").prepared == []


def test_preparing_on_a_closed_pool_moves_to_the_next_open_one_and_prepares_it_afresh():
    req = request(instance_types=["g6.xlarge", "p5.48xlarge"])
    mixed = pools("us-west-2/a") + pools("us-west-2/a", itype="p5.48xlarge") + pools("us-east-1/a")
    run = entered(fill.start(req), "us-west-2").model_copy(update={"blocked": ["spot/us-west-2/G and VT"], "next": "prepare"})
    # The P pool of the same region is next: prepared again (its region's setup is redone), not launched into.
    moved = fill.prepare(run, mixed, req)
    assert (moved.cursor, moved.next, moved.launch) == (1, "prepare", None)
    gone = fill.prepare(run.model_copy(update={"blocked": ["spot/us-west-2"]}), mixed, req)
    assert (gone.cursor, gone.next) == (2, "prepare")


def test_a_market_without_pools_is_exhausted_at_once():
    req = request()
    run = fill.prepare(fill.start(req), [], req)
    assert (run.next, run.cursor, run.blocked) == ("exhausted", 0, [])


def test_each_attempt_keeps_ec2s_code_and_the_cost_adds_known_prices_to_four_places():
    req = request(count=8)
    spot = pools("us-west-2/a", "us-west-2/b")
    run = fill.after_attempt(entered(fill.start(req), "us-west-2"), spot, CAPACITY, req)
    assert [(a.number, a.outcome, a.reason, a.batch, a.launched) for a in run.step_attempts] == [
        (1, "capacity", "InsufficientInstanceCapacity", 4, 0)]
    priced = launched(2, spot[1])
    priced.instances[0].hourly_price, priced.instances[1].hourly_price = 0.123456, None  # a price unknown adds nothing
    run = fill.after_attempt(run, spot, priced, req)
    assert (run.hourly_cost, run.launched, run.attempts_total) == (0.1235, 2, 2)


def test_more_instances_than_the_batch_is_an_error_naming_both_counts():
    req = request()
    spot = pools("us-west-2/a")
    with pytest.raises(ValueError, match="^RunInstances returned 5 instances for a batch of 4$"):
        fill.after_attempt(entered(fill.start(req), "us-west-2"), spot, launched(5, spot[0]), req)


def test_a_launch_into_a_reservation_names_it_in_the_attempt_and_counts_each_instance_it_took_once():
    req = request(count=8, launch_mode="exact")
    reserved = Pool(region="us-west-2", availability_zone="us-west-2a", instance_type="g6.xlarge", market="on-demand",
                    capacity_reservation_id="cr-1", reserved=3)
    plain = pools("us-west-2/b", market="on-demand")[0]
    run = entered(fill.prepare(fill.start(req), [reserved, plain], req), "us-west-2")
    assert run.batch == 3  # no more than the plan gave the reservation
    answer = launched(2, reserved)
    for instance in answer.instances:
        instance.capacity_reservation_id = "cr-1"
    run = fill.after_attempt(run, [reserved, plain], answer, req)
    assert run.step_attempts[-1].capacity_reservation_id == "cr-1" and run.reserved_taken == {"cr-1": 2}
    assert (run.next, run.cursor, run.batch) == ("launch", 0, 1)  # one place is left in it
