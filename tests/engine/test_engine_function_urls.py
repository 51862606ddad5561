"""The engine's function URLs (local/function_urls.py) and CloudTrail record (local/cloudtrail.py),
without an engine: the SigV4 check AWS makes before a function behind AuthType AWS_IAM runs, where
a URL's id is read from, and when a recorded StartExecution becomes visible to LookupEvents."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from gpufill.adapters import clock
from gpufill.local import cloudtrail
from gpufill.local.function_urls import Person, _signature, _url_id

URL = "https://0123456789abcdef0123456789abcdef.lambda-url.us-east-1.on.aws/"
ANA = Person("ana", "AKIAANA0000000000000", "ana-secret", arn="arn:aws:iam::123456789012:user/ana")


def signed(url: str = URL, *, secret: str = "ana-secret", service: str = "lambda", body: bytes = b'{"a":1}') -> dict:
    request = AWSRequest(method="POST", url=url, data=body, headers={"Content-Type": "application/json"})
    SigV4Auth(Credentials(ANA.access_key, secret), service, "us-east-1").add_auth(request)
    headers = {k.lower(): v for k, v in request.prepare().headers.items()}
    fields = dict(p.strip().split("=", 1) for p in headers["authorization"].split(" ", 1)[1].split(","))
    return {"headers": headers, "signed": fields["SignedHeaders"].split(";"), "signature": fields["Signature"]}


def check(request: dict, *, url: str = URL, body: bytes = b'{"a":1}') -> bool:
    headers = {h: request["headers"][h] for h in request["signed"] if h in request["headers"]}
    return _signature(ANA, "us-east-1", "POST", url, headers, body) == request["signature"]


def test_the_signature_of_the_keys_secret_passes_and_anything_else_does_not():
    assert check(signed())
    assert not check(signed(secret="guessed"))
    assert not check(signed(), body=b'{"a":2}')  # the body is signed: an answer cannot be changed on the way
    assert not check(signed(), url=URL + "other")


@pytest.mark.parametrize("url", [URL, "http://127.0.0.1:4566/lambda-url/0123456789abcdef0123456789abcdef/"])
def test_a_urls_id_is_read_from_its_host_or_the_served_path(url):
    assert _url_id(url) == "0123456789abcdef0123456789abcdef"


@pytest.fixture
def trail(monkeypatch):
    now = {"t": datetime(2026, 12, 4, 12, tzinfo=UTC).timestamp()}
    monkeypatch.setattr(clock, "epoch", lambda: now["t"])
    return cloudtrail.Trail(), now


def test_a_start_is_visible_only_after_cloudtrail_delivers_it_and_inside_the_window(trail):
    recorded, now = trail
    started = datetime.fromtimestamp(now["t"], UTC)
    arn = "arn:aws:states:us-east-1:123456789012:execution:gpufill-provisioner-local:run-1"
    recorded.record_start(arn, started, ANA.arn)
    assert recorded.lookup("StartExecution", started - timedelta(minutes=2), started + timedelta(minutes=2)) == []
    now["t"] += cloudtrail.DELIVERY_SECONDS
    [event] = recorded.lookup("StartExecution", started - timedelta(minutes=2), started + timedelta(minutes=2))
    record = json.loads(event["CloudTrailEvent"])
    assert record["userIdentity"]["arn"] == ANA.arn and record["responseElements"]["executionArn"] == arn
    assert recorded.lookup("StopExecution", None, None) == []
    assert recorded.lookup("StartExecution", started + timedelta(seconds=1), None) == []
