import pytest
from pydantic import ValidationError

from gpufill.models.request import Request, describe_problems, normalise
from gpufill.policy.tokens import client_token


def test_defaults_fill_in():
    request = normalise(Request(), request_id="r1", default_regions=["us-west-2"], home_region="us-east-1")
    assert (request.instance_types, request.count, request.batch_max) == (["g6.xlarge"], 1, 1)
    assert (request.market, request.launch_mode, request.regions, request.origin_region) == (
        "spot", "partial", ["us-west-2"], "us-east-1")
    assert normalise(Request(count=9), request_id="r", default_regions=[], home_region="x").batch_max == 4


def test_every_bad_field_is_named_at_once():
    with pytest.raises(ValidationError) as caught:
        Request.model_validate({"count": 0, "regions": ["atlantis-1"], "market": "x", "tags": {"aws:x": "y"}})
    assert sorted(p["field"] for p in describe_problems(caught.value)) == ["count", "market", "regions", "tags"]


def test_client_token_is_deterministic_short_and_distinct_per_step():
    long_id = "x" * 80
    assert client_token(long_id, 3) == client_token(long_id, 3)
    assert client_token(long_id, 3) != client_token(long_id, 4)
    assert client_token("a", 1) != client_token("b", 1)
    assert len(client_token(long_id, 9999)) <= 64 and client_token(long_id, 1).isascii()
