"""The market every engine test's simulated account starts from."""

WEST, EAST, IRELAND = "us-west-2", "us-east-1", "eu-west-1"
MARKET = {
    "description": "room for every launch these tests make",
    "regions": {
        WEST: {
            "placement_score": {"g6.xlarge": 9, "g5.xlarge": 9, "g6.2xlarge": 9},
            "zones": {
                f"{WEST}{z}": {
                    t: {"spot_price": 0.4, "spot": 100, "on_demand": 100}
                    for t in ("g6.xlarge", "g5.xlarge", "g6.2xlarge")
                }
                for z in "abc"
            },
        },
        EAST: {
            "placement_score": {"g6.xlarge": 8, "g5.xlarge": 8, "g6.2xlarge": 8},
            "zones": {
                f"{EAST}{z}": {
                    t: {"spot_price": 0.5, "spot": 100, "on_demand": 100}
                    for t in ("g6.xlarge", "g5.xlarge", "g6.2xlarge")
                }
                for z in "abcdef"
            },
        },
        IRELAND: {
            "placement_score": {"g6.xlarge": 7, "g5.xlarge": 7, "g6.2xlarge": 7},
            "zones": {f"{IRELAND}{z}": {"g6.xlarge": {"spot_price": 0.6, "spot": 100, "on_demand": 100}} for z in "abc"},
        },
    },
}
