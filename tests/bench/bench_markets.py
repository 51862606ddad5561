"""Hand-made markets the bench tests count by hand."""

from bench.cases import Case


def stock(price, spot):
    return {"g6.xlarge": {"spot_price": price, "spot": spot}}


def case(regions: dict, count: int) -> Case:
    request = {"instance_types": ["g6.xlarge"], "count": count, "regions": sorted(regions)}
    return Case(name="hand", scenario={"regions": regions}, request=request, tier="tight")


# Oregon scores first (cheaper, three zones, better tier) but holds a single instance;
# Virginia holds two.
OREGON_FIRST = {
    "us-west-2": {
        "advisor_tier": {"g6.xlarge": 0},
        "zones": {"us-west-2a": stock(0.40, 0), "us-west-2b": stock(0.41, 1), "us-west-2c": stock(0.42, 0)},
    },
    "us-east-1": {"advisor_tier": {"g6.xlarge": 3}, "zones": {"us-east-1a": stock(0.45, 2)}},
}
