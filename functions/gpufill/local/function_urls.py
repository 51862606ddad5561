"""Lambda function URLs with AuthType AWS_IAM on the local engine, as AWS serves them.

A request to a function URL is checked before the function runs, in AWS's order:
1. the SigV4 signature: its access key must belong to a principal of the account (`engine.people`)
   and the signature must be the one that principal's secret key makes (service `lambda`);
2. IAM: the principal's identity policies must allow `lambda:InvokeFunctionUrl` on the function
   with `lambda:FunctionUrlAuthType` = AWS_IAM, and `lambda:InvokeFunction` with
   `lambda:InvokedViaFunctionUrl` = true (AWS requires both of URLs created since October 2025).
   The judge is the one every other call of the engine goes through, and each decision is kept
   in `engine.iam`. Resource-based policies are not modelled (the app grants none on its URL).
Either refusal is AWS's: HTTP 403 {"Message": "Forbidden"}, and the function does not run.
Then the function runs in-process, as its own role, with the payload-2.0 event AWS builds, whose
requestContext.authorizer.iam names the caller; its answer {statusCode, headers, body} is the reply.

The account has one person from the start: the user `local-operator`, holding every deployment's
approver policy, whose keys are the ones the engine's environment signs with (LOCAL_OPERATOR_KEYS). Tests add
others with `add_person`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from gpufill.local.iam.enforcement import Principal

# The local operator signs with the key `gpufill local serve` tells the shell to use, or, in the
# engine's own process, with the one moto's mock puts in the environment.
LOCAL_OPERATOR_KEYS = (("gpufill-local", "gpufill-local"), ("FOOBARKEY", "FOOBARSECRET"))
FORBIDDEN = (403, {"Content-Type": "application/json"}, json.dumps({"Message": "Forbidden"}))
# `gpufill local serve` serves a URL https://<id>.lambda-url.<region>.on.aws/ at <endpoint>/lambda-url/<id>/.
SERVED_PREFIX = "/lambda-url/"


@dataclass(frozen=True)
class Person:
    """An IAM user of the simulated account with its access key."""

    name: str
    access_key: str
    secret_key: str
    policies: tuple[tuple[str, dict], ...] = ()
    arn: str = ""
    user_id: str = field(default="")

    def principal(self, account: str) -> Principal:
        return Principal(name=self.name, arn=self.arn, policies=self.policies, role_arn=self.arn, account=account)


class FunctionUrls:
    """The engine's part that serves function URLs (a part of LocalEngine)."""

    def __init__(self) -> None:
        super().__init__()
        self.people: dict[str, Person] = {}

    def approver_policies(self) -> tuple[tuple[str, dict], ...]:
        """Every deployment's approver managed policy, as (name, document)."""
        return tuple(
            (name, document)
            for deployment in self.deployments.values()
            for name, (_, document) in deployment.app.home.managed_policies.items()
        )

    def add_person(
        self, name: str, *, policies: tuple[tuple[str, dict], ...] = (), access_key: str | None = None, secret_key: str | None = None
    ) -> Person:
        """An IAM user `name` with an access key and these identity policies (none: may call nothing)."""
        digest = hashlib.sha256(name.encode()).hexdigest().upper()
        person = Person(
            name=name,
            access_key=access_key or f"AKIA{digest[:16]}",
            secret_key=secret_key or hashlib.sha256(f"secret:{name}".encode()).hexdigest()[:40],
            policies=tuple(policies),
            arn=f"arn:aws:iam::{self.account}:user/{name}",
            user_id=f"AIDA{digest[16:33]}",
        )
        self.people[person.access_key] = person
        return person

    def _add_local_operator(self) -> None:
        for key, secret in LOCAL_OPERATOR_KEYS:
            self.add_person("local-operator", policies=self.approver_policies(), access_key=key, secret_key=secret)

    def function_url(self, task: str, env: str | None = None) -> str:
        """The URL of function `task` (AnswerApproval) of deployment `env`, as its stack output gives it."""
        home = self.deployments[env or self.env_names[0]].app.home
        function = home.functions[task]
        [url] = [u for u in home.function_urls if u.function_arn == function.arn]
        return url.url

    def call_function_url(self, url: str, *, method: str, headers: dict[str, str], body: bytes) -> tuple[int, dict, str]:
        """Serve one HTTP request to a function URL: (status, headers, body)."""
        found = self._url_of(url)
        if found is None:
            return 404, {"Content-Type": "application/json"}, json.dumps({"Message": "Not Found"})
        person = self._authenticated(url, method, headers, body)
        if person is None:
            return FORBIDDEN
        function = next(f for f in self.functions.values() if f.arn == found.function_arn)
        if found.auth_type == "AWS_IAM" and not self._allowed(person, function):
            return FORBIDDEN
        event = _event(found, function, person, self.account, method, url, headers, body)
        response = self.client("lambda", function.arn.split(":")[3]).invoke(FunctionName=function.arn, Payload=json.dumps(event))
        payload = json.loads(response["Payload"].read() or b"null")
        if response.get("FunctionError"):
            return 502, {"Content-Type": "application/json"}, json.dumps({"Message": "Internal Server Error"})
        if isinstance(payload, dict) and "statusCode" in payload:
            text = payload.get("body") or ""
            if payload.get("isBase64Encoded"):
                text = base64.b64decode(text).decode()
            return int(payload["statusCode"]), dict(payload.get("headers") or {}), text
        return 200, {"Content-Type": "application/json"}, json.dumps(payload)

    def _url_of(self, url: str):
        url_id = _url_id(url)
        for deployment in self.deployments.values():
            for candidate in deployment.app.home.function_urls:
                if candidate.url_id == url_id:
                    return candidate
        return None

    def _authenticated(self, url: str, method: str, headers: dict[str, str], body: bytes) -> Person | None:
        """The person whose key signed the request, if the signature is theirs (SigV4, service lambda)."""
        lower = {k.lower(): v for k, v in headers.items()}
        authorization = lower.get("authorization", "")
        if not authorization.startswith("AWS4-HMAC-SHA256 "):
            return None
        fields = dict(part.strip().split("=", 1) for part in authorization[len("AWS4-HMAC-SHA256 "):].split(","))
        key, _, region, service, _ = (fields.get("Credential", "") + "////").split("/", 4)
        person = self.people.get(key)
        if person is None or service != "lambda":
            return None
        signed = fields.get("SignedHeaders", "").split(";")
        # A signed header the transport did not pass on (Host, in-process) is computed from the URL, as botocore does.
        if _signature(person, region, method, url, {h: lower[h] for h in signed if h in lower}, body) != fields.get("Signature"):
            return None
        return person

    def _allowed(self, person: Person, function) -> bool:
        from gpufill.local.iam import evaluator as evaluation
        from gpufill.local.iam.evaluator import Authorization

        principal = person.principal(self.account)
        region = function.arn.split(":")[3]
        base = {**principal.context(), "aws:RequestedRegion": region}
        checks = [
            Authorization("lambda:InvokeFunctionUrl", function.arn, {**base, "lambda:FunctionUrlAuthType": "AWS_IAM"}),
            Authorization("lambda:InvokeFunction", function.arn, {**base, "lambda:InvokedViaFunctionUrl": "true"}),
        ]
        judge = evaluation.shared()
        decisions = [judge.judge(principal.arn, self.account, principal.policies, check) for check in checks]
        if self.iam is not None:
            for decision in decisions:
                self.iam.add(principal, decision)
        return all(d.allowed for d in decisions)


def _url_id(url: str) -> str:
    parts = urlsplit(url)
    if parts.path.startswith(SERVED_PREFIX):
        return parts.path[len(SERVED_PREFIX):].split("/", 1)[0]
    return (parts.hostname or "").split(".", 1)[0]


def _signature(person: Person, region: str, method: str, url: str, signed_headers: dict[str, str], body: bytes) -> str:
    """The SigV4 signature `person`'s secret makes for this request (botocore's own signer)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method=method, url=url, data=body, headers=signed_headers)
    request.context["timestamp"] = signed_headers.get("x-amz-date", "")
    signer = SigV4Auth(Credentials(person.access_key, person.secret_key, signed_headers.get("x-amz-security-token")), "lambda", region)
    canonical = signer.canonical_request(request)
    return signer.signature(signer.string_to_sign(request, canonical), request)


def _event(found, function, person: Person, account: str, method: str, url: str, headers: dict[str, str], body: bytes) -> dict:
    """The payload-2.0 event AWS hands a function behind a URL."""
    parts = urlsplit(found.url)
    now = time.time()
    text = body.decode("utf-8", errors="replace")
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": urlsplit(url).path or "/",
        "rawQueryString": urlsplit(url).query,
        "headers": {k.lower(): v for k, v in headers.items() if k.lower() != "authorization"},
        "requestContext": {
            "accountId": "anonymous",
            "apiId": found.url_id,
            "authorizer": {"iam": {
                "accessKey": person.access_key,
                "accountId": account,
                "callerId": person.user_id,
                "cognitoIdentity": None,
                "principalOrgId": None,
                "userArn": person.arn,
                "userId": person.user_id,
            }},
            "domainName": parts.hostname,
            "domainPrefix": found.url_id,
            "http": {"method": method, "path": "/", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1",
                     "userAgent": headers.get("User-Agent", "")},
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "body": text,
        "isBase64Encoded": False,
    }


def in_process(engine):
    """A request botocore's HTTP session sends to a function URL of the engine
    (https://<id>.lambda-url.<region>.on.aws/) is served by the engine, not the internet."""
    from unittest import mock

    from botocore.awsrequest import AWSResponse
    from botocore.httpsession import URLLib3Session
    from moto.core.botocore_stubber import MockRawResponse

    original = URLLib3Session.send

    def send(session, request):
        host = urlsplit(request.url).hostname or ""
        if ".lambda-url." not in host or not host.endswith(".on.aws"):
            return original(session, request)
        body = request.body or b""
        body = body.encode() if isinstance(body, str) else body if isinstance(body, bytes) else body.read()
        status, headers, text = engine.call_function_url(request.url, method=request.method, headers=dict(request.headers), body=body)
        return AWSResponse(request.url, status, headers, MockRawResponse(text))

    return mock.patch.object(URLLib3Session, "send", send)
