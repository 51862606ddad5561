"""The move after a launch answer is decided by the answer alone: a batch kept, halved or asked
again goes back to launch whatever `next` the run came in with, so the fill loop stays right if
LaunchBatch is ever entered from another step than the one that set `next` to launch today."""

from typing import get_args

from hypothesis import given
from hypothesis import strategies as st

from gpufill.models.request import Request, normalise
from gpufill.models.run import FleetAnswer, Instance, LaunchResult, Pool, PoolAnswer, RegionLaunch, WhereNext
from gpufill.policy import fill, fleet_moves

CAME_FROM = st.sampled_from(get_args(WhereNext))
CAPACITY = LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity")
QUOTA = LaunchResult(outcome="quota", reason="MaxSpotInstanceCountExceeded")


def request(**fields):
    return normalise(Request(**{"count": 8, "batch_max": 4, **fields}), request_id="f", default_regions=["us-west-2"],
                     home_region="us-east-1")


def pools(*zones):
    return [Pool(region="us-west-2", availability_zone=f"us-west-2{z}", instance_type="g6.xlarge", market="spot", price=0.5)
            for z in zones]


def run_in(req, came_from):
    run = fill.enter_region(fill.start(req), RegionLaunch(region="us-west-2", image_id="ami-1", root_volume_gib=200))
    return run.model_copy(update={"next": came_from})


def launched(pool, n):
    return [Instance(instance_id=f"i-{pool.availability_zone}-{k}", region=pool.region, availability_zone=pool.availability_zone,
                     instance_type=pool.instance_type, market=pool.market, hourly_price=0.5) for k in range(n)]


@given(CAME_FROM)
def test_a_whole_batch_launched_keeps_launching_in_the_same_pool(came_from):
    req = request(launch_mode="exact")
    spot = pools("a", "b")
    moved = fill.after_attempt(run_in(req, came_from), spot, LaunchResult(outcome="launched", instances=launched(spot[0], 4)), req)
    assert (moved.next, moved.cursor, moved.batch, moved.remaining) == ("launch", 0, 4, 4)


@given(CAME_FROM, st.sampled_from([CAPACITY, QUOTA]))
def test_a_batch_too_big_for_the_pool_is_halved_and_tried_again_there(came_from, answer):
    req = request(launch_mode="exact")
    moved = fill.after_attempt(run_in(req, came_from), pools("a", "b"), answer, req)
    assert (moved.next, moved.cursor, moved.batch) == ("launch", 0, 2)


@given(CAME_FROM)
def test_pools_ec2_was_too_busy_for_are_asked_again_at_once(came_from):
    req = request(launch_mode="fleet", count=4)
    spot = pools("a", "b", "c")
    answer = FleetAnswer(answers=[
        PoolAnswer(index=0, result=LaunchResult(outcome="launched", instances=launched(spot[0], 1))),
        PoolAnswer(index=1, result=LaunchResult(outcome="throttled", reason="RequestLimitExceeded")),
    ])
    moved = fleet_moves.after_fleet(run_in(req, came_from), spot, answer, req)
    assert (moved.next, moved.fleet_retries) == ("launch", 1)
