"""A cluster placement group holds one network segment's room, not the whole AZ's (its own
simulated account: the scenario sets the room)."""

from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.engine.simulated_account import WEST
from tests.engine.test_engine_cluster_groups import into
from tests.engine.test_engine_market import error_of, launch

CLUSTER_MARKET = {"regions": {WEST: {"zones": {f"{WEST}a": {"g6.xlarge": {"spot": 10, "on_demand": 10, "cluster": 3}}}}}}


def test_a_cluster_group_holds_one_clusters_room_even_when_the_zone_has_more():
    with LocalEngine(MarketScenario.model_validate(CLUSTER_MARKET)) as account:
        ec2 = account.client("ec2", WEST)
        ec2.create_placement_group(GroupName="pg-full", Strategy="cluster")
        code, message = error_of(lambda: launch(account, MinCount=4, MaxCount=4, **into("pg-full")))
        assert code == "InsufficientInstanceCapacity" and message.endswith("for placement group pg-full.")
        assert len(launch(account, MinCount=1, MaxCount=4, **into("pg-full"))) == 3
        # Added later, the group has no room left, though the AZ still has 7.
        assert error_of(lambda: launch(account, **into("pg-full")))[0] == "InsufficientInstanceCapacity"
        assert len(launch(account, MinCount=4, MaxCount=4)) == 4
