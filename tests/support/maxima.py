"""The largest valid market: every catalog region x ten types x four AZs."""

from __future__ import annotations

from gpufill import catalog

TEN_TYPES = ["g6.xlarge", "g6.2xlarge", "g6.4xlarge", "g6.12xlarge", "g5.xlarge",
             "g5.2xlarge", "g5.4xlarge", "g5.12xlarge", "g6e.xlarge", "g6e.2xlarge"]


def every_region() -> list[str]:
    return sorted(catalog.known_regions())


def maxima_market(*, spot: int = 0, on_demand: int = 0, zones: str = "abcd") -> dict:
    """Every catalog region x ten types x four AZs: spot/on-demand instances per pool."""
    return {"regions": {
        region: {"zones": {
            f"{region}{z}": {t: {"spot_price": round(0.4 + 0.01 * n, 4), "spot": spot, "on_demand": on_demand}
                             for n, t in enumerate(TEN_TYPES)}
            for z in zones}}
        for region in every_region()}}
