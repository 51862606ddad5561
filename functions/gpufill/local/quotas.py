"""Service Quotas' EC2 vCPU quotas, answered from the market scenario.

A scenario's region sets `quota.spot_vcpus` / `quota.on_demand_vcpus`; EC2 enforces them at launch
(local/market.py) and Service Quotas reports them, so `gpufill doctor` reads what a launch meets.
A region with no quota set has room for more than any run asks.
"""

from __future__ import annotations

from unittest import mock

# The G and P families' vCPU quotas, per market (the same codes gpufill doctor asks for).
EC2_QUOTAS = {
    "L-3819A6DF": ("spot", "All G and VT Spot Instance Requests"),
    "L-DB2E81BA": ("on_demand", "Running On-Demand G and VT instances"),
    "L-7212CCBC": ("spot", "All P Spot Instance Requests"),
    "L-417A185B": ("on_demand", "Running On-Demand P instances"),
}
UNBOUNDED_VCPUS = 100_000


def patches(scenario):
    from moto.servicequotas.exceptions import NoSuchResource
    from moto.servicequotas.models import ServiceQuotasBackend

    original = ServiceQuotasBackend.get_service_quota

    def get_service_quota(backend, service_code: str, quota_code: str) -> dict:
        if service_code != "ec2":
            return original(backend, service_code, quota_code)
        if quota_code not in EC2_QUOTAS:
            raise NoSuchResource
        market, name = EC2_QUOTAS[quota_code]
        region = scenario.regions.get(backend.region_name)
        limit = getattr(region.quota, f"{market}_vcpus") if region is not None else None
        return {
            "ServiceCode": "ec2",
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:{backend.region_name}:{backend.account_id}:ec2/{quota_code}",
            "QuotaCode": quota_code,
            "QuotaName": name,
            "Value": float(UNBOUNDED_VCPUS if limit is None else limit),
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
        }

    return mock.patch.object(ServiceQuotasBackend, "get_service_quota", get_service_quota)
