"""Which AWS failures gpufill tries again and which it takes as an answer (adapters/aws.py).

A sold-out pool read as "try again" asks EC2 six times for one answer and hides the capacity
signal; a throttle read as an answer ends a run that would have filled. The botocore client is
real: only its HTTP exchange is answered in-process.
"""

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from gpufill.adapters import aws


def client_error(code: str, status: int | None = None) -> ClientError:
    response: dict = {"Error": {"Code": code, "Message": code}}
    if status is not None:
        response["ResponseMetadata"] = {"HTTPStatusCode": status}
    return ClientError(response, "RunInstances")


@pytest.mark.parametrize("error", [
    ReadTimeoutError(endpoint_url="https://ec2"),
    ConnectTimeoutError(endpoint_url="https://ec2"),
    EndpointConnectionError(endpoint_url="https://ec2"),
    ConnectionClosedError(endpoint_url="https://ec2"),
])
def test_a_lost_connection_is_tried_again(error):
    assert aws.is_transient(error)


@pytest.mark.parametrize("code", sorted(aws.TRANSIENT_CODES))
def test_throttling_and_server_trouble_are_tried_again_whatever_the_status(code):
    assert aws.is_transient(client_error(code, 400))
    assert aws.is_transient(client_error(code))


@pytest.mark.parametrize("code", ["InsufficientInstanceCapacity", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded"])
def test_a_sold_out_pool_or_a_quota_is_an_answer_even_as_a_server_error(code):
    assert not aws.is_transient(client_error(code, 500))


@pytest.mark.parametrize(("status", "transient"), [(500, True), (503, True), (499, False), (400, False), (None, False)])
def test_an_unknown_code_is_judged_by_its_status(status, transient):
    assert aws.is_transient(client_error("SomethingNew", status)) is transient


def test_an_error_without_a_code_is_judged_by_its_status():
    error = ClientError({"ResponseMetadata": {"HTTPStatusCode": 502}}, "GetParameter")
    assert aws.is_transient(error)
    assert not aws.is_transient(ClientError({}, "GetParameter"))


def test_an_aws_error_wrapped_by_a_library_is_still_seen():
    class GetParameterError(Exception):
        pass

    for link in ("__cause__", "__context__"):
        wrapped = GetParameterError("parameter unreadable")
        setattr(wrapped, link, client_error("ThrottlingException", 400))
        assert aws.is_transient(wrapped), link
    outer = RuntimeError("outer")
    outer.__cause__ = GetParameterError("middle")
    outer.__cause__.__context__ = ReadTimeoutError(endpoint_url="https://ssm")
    assert aws.is_transient(outer)


def test_a_plain_failure_or_a_refusal_is_not_tried_again():
    assert not aws.is_transient(ValueError("bad input"))
    assert not aws.is_transient(client_error("UnauthorizedOperation", 403))
    looped = RuntimeError("a")
    looped.__cause__ = RuntimeError("b")
    looped.__cause__.__cause__ = looped  # a cycle of causes ends the walk instead of spinning
    assert not aws.is_transient(looped)


# --- the real botocore client, answered in-process -------------------------------------------------

CAPACITY_BODY = (b'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>InsufficientInstanceCapacity'
                 b'</Code><Message>We currently do not have sufficient capacity</Message></Error></Errors>'
                 b'<RequestID>r</RequestID></Response>')
INTERNAL_BODY = CAPACITY_BODY.replace(b"InsufficientInstanceCapacity", b"InternalError")


@pytest.fixture
def ec2(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    aws.forget_clients()
    made = aws.client("ec2", "us-west-2")
    yield made
    aws.forget_clients()


def answer(client, replies: list):
    """Each HTTP exchange of `client` gets the next of `replies`: (status, body), or an exception raised."""
    sent = []

    def send(request, **_):
        sent.append(request)
        reply = replies[min(len(sent), len(replies)) - 1]
        if isinstance(reply, Exception):
            raise reply
        status, body = reply
        return AWSResponse(request.url, status, {}, _Raw(body))

    client.meta.events.register_first("before-send.ec2", send)
    return sent


class _Raw:
    def __init__(self, body: bytes):
        self.body = body

    def stream(self, **_):
        yield self.body


def run(ec2):
    return ec2.run_instances(ImageId="ami-1", MinCount=1, MaxCount=1, InstanceType="g6.xlarge")


def test_a_sold_out_pool_is_asked_once_not_retried_like_a_server_error(ec2, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda _s: None)
    sent = answer(ec2, [(500, CAPACITY_BODY)])
    with pytest.raises(ClientError) as raised:
        run(ec2)
    assert raised.value.response["Error"]["Code"] == "InsufficientInstanceCapacity"
    assert len(sent) == 1


def test_other_server_errors_keep_botocores_retries(ec2, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda _s: None)
    sent = answer(ec2, [(500, INTERNAL_BODY)])
    with pytest.raises(ClientError):
        run(ec2)
    assert len(sent) == 6  # RETRIES: the first try and five retries


def test_the_client_is_kept_per_service_and_region_until_forgotten(ec2):
    assert aws.client("ec2", "us-west-2") is ec2
    assert aws.client("ec2", "us-east-1") is not ec2
    assert aws.client("ec2", "us-west-2").meta.region_name == "us-west-2"
    table = aws.resource("dynamodb", "us-west-2")
    assert aws.resource("dynamodb", "us-west-2") is table
    aws.forget_clients()
    assert aws.client("ec2", "us-west-2") is not ec2
    assert aws.resource("dynamodb", "us-west-2") is not table


def test_attempts_say_whether_any_try_reached_aws(ec2, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda _s: None)
    answer(ec2, [EndpointConnectionError(endpoint_url="https://ec2")])
    with aws.attempts() as seen, pytest.raises(EndpointConnectionError):
        run(ec2)
    assert seen and set(seen) == {"unreached"}

    aws.forget_clients()
    again = aws.client("ec2", "us-west-2")
    answer(again, [ReadTimeoutError(endpoint_url="https://ec2"), ConnectTimeoutError(endpoint_url="https://ec2")])
    with aws.attempts() as seen, pytest.raises(ConnectTimeoutError):
        run(again)
    # The first try may have arrived (its reply was lost); the later ones could not connect.
    assert seen[0] == "reached" and set(seen[1:]) == {"unreached"} and len(seen) == 6


def test_attempts_are_only_counted_inside_the_block(ec2, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda _s: None)
    answer(ec2, [(500, CAPACITY_BODY)])
    with aws.attempts() as seen:
        with pytest.raises(ClientError):
            run(ec2)
    assert seen == ["reached"]
    with pytest.raises(ClientError):
        run(ec2)  # outside the block: nothing is noted, nothing fails
    assert seen == ["reached"]
