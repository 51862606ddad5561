"""The DynamoDB instances table: one item per launched instance, written as soon as it exists."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from decimal import Decimal

from gpufill.adapters.aws import resource
from gpufill.constants import ENV_INSTANCES_TABLE, INSTANCES_BY_REQUEST_INDEX
from gpufill.models.run import Instance


class InstanceRecordError(Exception):
    """Raised when launched instances could not be recorded; the step is retried with the same ClientToken."""


def _table():
    return resource("dynamodb").Table(os.environ[ENV_INSTANCES_TABLE])


def record_launched(instances: list[Instance], *, request_id: str, client_token: str) -> None:
    now = datetime.now(UTC).isoformat(timespec="seconds")
    try:
        with _table().batch_writer(overwrite_by_pkeys=["instance_id"]) as batch:
            for instance in instances:
                item = instance.model_dump(exclude_none=True)
                if instance.hourly_price is not None:
                    item["hourly_price"] = Decimal(str(instance.hourly_price))
                batch.put_item(
                    Item={
                        **item,
                        "request_id": request_id,
                        "client_token": client_token,
                        "state": "pending",
                        "launched_at": now,
                    }
                )
    except Exception as error:
        raise InstanceRecordError(f"could not record {[i.instance_id for i in instances]}: {error}") from error


def records_for_request(request_id: str) -> list[dict]:
    table = _table()
    items, kwargs = [], {}
    while True:
        page = table.query(
            IndexName=INSTANCES_BY_REQUEST_INDEX,
            KeyConditionExpression="request_id = :r",
            ExpressionAttributeValues={":r": request_id},
            **kwargs,
        )
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
