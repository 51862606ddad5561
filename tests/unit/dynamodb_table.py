"""The instances table as the stack defines it (key instance_id, index by-request on request_id),
in moto's DynamoDB, for the adapters that read and write it."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from gpufill.adapters import aws
from gpufill.constants import ENV_INSTANCES_TABLE, INSTANCES_BY_REQUEST_INDEX

TABLE = "gpufill-instances-test"


@pytest.fixture
def table(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv(ENV_INSTANCES_TABLE, TABLE)
    with mock_aws():
        aws.forget_clients()
        made = boto3.resource("dynamodb", region_name="us-east-1").create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "instance_id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "instance_id", "AttributeType": "S"},
                                  {"AttributeName": "request_id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
            GlobalSecondaryIndexes=[{"IndexName": INSTANCES_BY_REQUEST_INDEX,
                                     "KeySchema": [{"AttributeName": "request_id", "KeyType": "HASH"}],
                                     "Projection": {"ProjectionType": "ALL"}}],
        )
        yield made
        aws.forget_clients()


def item(table, key: str) -> dict | None:
    return table.get_item(Key={"instance_id": key}, ConsistentRead=True).get("Item")
