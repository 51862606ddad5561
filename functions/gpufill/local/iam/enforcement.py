"""Every AWS call judged by IAM before the simulated service answers, as AWS does.

`judged_calls(principal_provider, world)` patches the two places botocore and moto meet:
`BaseClient._make_api_call`, to keep each call's operation and parameters at hand (a stack per
thread: a Lambda invoked in-process makes calls of its own inside the invoke), and
`BotocoreStubber.__call__`, where botocore hands the signed request to moto, so a refusal is an
HTTP answer that botocore parses and retries (or not) as it would AWS's.

The provider names the calling principal, or None for the engine's own calls (deploying, test
set-up), which are not judged. `calling_access_key()` tells it which credentials signed the
request being judged: moto's state machine interpreter signs with its own ("ak").

A refused call gets AWS's answer: EC2 `UnauthorizedOperation` (403, with an encoded authorization
failure message that the engine's STS `DecodeAuthorizationMessage` decodes), SNS `AuthorizationError`
(403), the JSON services `AccessDeniedException` (400; Lambda 403), S3 and the query services
`AccessDenied` (403), each with AWS's message naming the principal, action and resource.

An EC2 call with `DryRun=True` is answered as EC2 does, never reaching the simulated service:
allowed, `DryRunOperation` (412); refused, the same `UnauthorizedOperation` as without DryRun; an
instance it names that does not exist, `InvalidInstanceID.NotFound` (nothing to authorize against).
"""

from __future__ import annotations

import base64
import json
import threading
import zlib
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from unittest import mock
from xml.sax.saxutils import escape

from gpufill.local.iam import evaluator as evaluation
from gpufill.local.iam.authorizations import Call, UnknownCall, World, authorizations
from gpufill.local.iam.evaluator import EXPLICITLY_DENIED, Decision, Evaluator

STATE_MACHINE_ACCESS_KEY = "ak"  # moto's interpreter signs every call it makes with this key

# botocore service name -> IAM prefix, where they differ.
IAM_PREFIX = {"stepfunctions": "states"}


@dataclass(frozen=True)
class Principal:
    """Who signs a call: a role session, and the role's policies as deployed."""

    name: str  # the role's name
    arn: str  # the caller as AWS names it in a refusal: arn:aws:sts::<account>:assumed-role/<role>/<session>
    policies: tuple[tuple[str, dict], ...]
    role_arn: str = ""
    account: str = ""
    # A call made with an instance's role credentials carries the instance's ARN.
    source_instance_arn: str | None = None

    def context(self) -> dict[str, str]:
        context = {"aws:PrincipalArn": self.role_arn or self.arn, "aws:PrincipalAccount": self.account}
        if self.source_instance_arn:
            context["ec2:SourceInstanceARN"] = self.source_instance_arn
        return {k: v for k, v in context.items() if v}


PrincipalProvider = Callable[[], "Principal | None"]


@dataclass
class Judgement:
    principal: str
    action: str
    resource: str
    result: str
    context: dict = field(default_factory=dict)
    role_arn: str = ""


@dataclass
class Judgements:
    """Every decision made while enforcing, for reports and tests."""

    seen: list[Judgement] = field(default_factory=list)
    refusals: list[Judgement] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, principal: Principal, decision: Decision) -> None:
        authorization = decision.authorization
        judgement = Judgement(principal.name, authorization.action, authorization.resource, decision.result,
                              dict(authorization.context), principal.role_arn)
        with self._lock:
            self.seen.append(judgement)
            if not decision.allowed:
                self.refusals.append(judgement)


_calls = threading.local()


def calling_access_key() -> str | None:
    """The access key that signed the request being judged (for a principal provider)."""
    return getattr(_calls, "access_key", None)


def current_call() -> dict | None:
    """The call being judged (service, operation, params), for a principal provider."""
    stack = getattr(_calls, "stack", None)
    if not stack:
        return None
    service_model, operation, params, region = stack[-1]
    return {"service": service_model.service_name, "operation": operation, "params": params, "region": region}


def _stack() -> list:
    if not hasattr(_calls, "stack"):
        _calls.stack = []
    return _calls.stack


def _access_key(request) -> str | None:
    header = request.headers.get("Authorization") or b""
    if isinstance(header, bytes):
        header = header.decode(errors="replace")
    marker = "Credential="
    if marker not in header:
        return None
    return header.split(marker, 1)[1].split("/", 1)[0]


@contextmanager
def judged_calls(
    principal_provider: PrincipalProvider,
    world: World,
    *,
    account: str,
    partition: str = "aws",
    judge: Evaluator | None = None,
    enabled: bool = True,
) -> Iterator[Judgements]:
    """Judge every call from here on; `enabled=False` is for engine tests about something else
    (nothing is judged, and an EC2 DryRun is still answered as EC2 answers an allowed one)."""
    judgements = Judgements()
    from botocore.client import BaseClient
    from moto.core.botocore_stubber import BotocoreStubber

    judge = (judge or evaluation.shared()) if enabled else None
    original_call = BaseClient._make_api_call
    original_send = BotocoreStubber.__call__

    def make_api_call(client, operation_name, api_params):
        stack = _stack()
        stack.append((client.meta.service_model, operation_name, api_params, client.meta.region_name))
        try:
            return original_call(client, operation_name, api_params)
        finally:
            stack.pop()

    def stubbed(stubber, event_name, request, **kwargs):
        if stubber.enabled and _stack():
            refusal = _refusal(request)
            if refusal is not None:
                return refusal
            service_model, operation, params, region = _stack()[-1]
            if service_model.service_name == "ec2" and params.get("DryRun"):
                return _dry_run_answer(request, world, operation, params, region or "us-east-1")
        return original_send(stubber, event_name, request, **kwargs)

    def _refusal(request):
        if not enabled:
            return None
        service_model, operation, params, region = _stack()[-1]
        _calls.access_key = _access_key(request)
        try:
            principal = principal_provider()
        finally:
            _calls.access_key = None
        if principal is None:
            return None
        service = IAM_PREFIX.get(service_model.service_name, service_model.service_name)
        call = Call(service, operation, params, region or "us-east-1", account, partition)
        refused = refusal(principal, call, world, judgements, judge)
        if refused is None:
            return None
        return _aws_answer(request, service_model, principal, refused)

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(BaseClient, "_make_api_call", make_api_call))
        stack.enter_context(mock.patch.object(BotocoreStubber, "__call__", stubbed))
        yield judgements


def refusal(principal: Principal, call: Call, world: World, judgements: Judgements,
            judge: Evaluator | None = None) -> Decision | None:
    """Judge one call of `principal` as AWS would: every check it needs, each recorded; the
    decision AWS refuses it with (an explicit Deny first), or None when every check passes."""
    judge = judge or evaluation.shared()
    try:
        checks = authorizations(call, world)
    except UnknownCall as error:
        raise UnknownCall(f"{error} (called by {principal.name})") from None
    checks = [type(c)(c.action, c.resource, {**principal.context(), **c.context}) for c in checks]
    decisions = [_judged(judge, principal, call, world, c) for c in checks]
    for decision in decisions:
        judgements.add(principal, decision)
    return _first_refusal(decisions)


# The services whose resources carry a policy of their own that AWS judges with the caller's.
RESOURCE_POLICY_SERVICES = ("sns:", "s3:")


def _judged(judge: Evaluator, principal: Principal, call: Call, world: World, check) -> Decision:
    """One check; an SNS topic's or S3 bucket's own policy is judged with the caller's, as AWS does.
    Every request reaches AWS over TLS (boto3 speaks HTTPS only), so aws:SecureTransport is true:
    a policy's Deny on SecureTransport=false (CDK's enforce_ssl) never matches gpufill's calls."""
    policy_of = getattr(world, "resource_policy", None)
    policy = policy_of(check.resource) if policy_of and check.action.startswith(RESOURCE_POLICY_SERVICES) else None
    if policy is None:
        return judge.judge(principal.arn, call.account, principal.policies, check)
    check = type(check)(check.action, check.resource, {**check.context, "aws:SecureTransport": "true"})
    return judge.judge(principal.arn, call.account, principal.policies, check, resource_policy=policy)


def _first_refusal(decisions: list[Decision]) -> Decision | None:
    for wanted in (EXPLICITLY_DENIED, evaluation.IMPLICITLY_DENIED):
        for decision in decisions:
            if decision.result == wanted:
                return decision
    return None


# --- AWS's refusals ---------------------------------------------------------------------------


def refusal_message(principal: Principal, decision: Decision, *, action_label: str | None = None) -> str:
    action = action_label or decision.authorization.action
    if decision.result != EXPLICITLY_DENIED:
        why = f"because no identity-based policy allows the {action} action"
    elif decision.denied_by_resource and not decision.denied_by:
        why = "with an explicit deny in a resource-based policy"
    else:
        why = "with an explicit deny in an identity-based policy"
    return f"User: {principal.arn} is not authorized to perform: {action} on resource: {decision.authorization.resource} {why}"


def _aws_answer(request, service_model, principal: Principal, decision: Decision):
    from botocore.awsrequest import AWSResponse
    from moto.core.botocore_stubber import MockRawResponse

    request_id = str(uuid.uuid4())
    protocol = service_model.protocol
    if service_model.service_name == "ec2":
        message = (f"You are not authorized to perform this operation. {refusal_message(principal, decision)}. "
                   f"Encoded authorization failure message: {encoded_failure(principal, decision)}")
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>UnauthorizedOperation</Code>'
            f"<Message>{escape(message)}</Message></Error></Errors><RequestID>{request_id}</RequestID></Response>"
        )
        status, headers = 403, {"Content-Type": "text/xml;charset=UTF-8"}
    elif service_model.service_name == "sns":
        action = "SNS:" + decision.authorization.action.split(":", 1)[1]
        message = refusal_message(principal, decision, action_label=action)
        body = (
            "<ErrorResponse><Error><Type>Sender</Type><Code>AuthorizationError</Code>"
            f"<Message>{escape(message)}</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
        )
        status, headers = 403, {"Content-Type": "text/xml"}
    elif protocol == "json":
        message = refusal_message(principal, decision)
        body = json.dumps({"__type": "AccessDeniedException", "message": message})
        status, headers = 400, {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": request_id}
    elif protocol == "rest-json":
        message = refusal_message(principal, decision)
        body = json.dumps({"Type": "User", "Message": message})
        status = 403
        headers = {"Content-Type": "application/json", "x-amzn-ErrorType": "AccessDeniedException", "x-amzn-RequestId": request_id}
    elif protocol == "rest-xml":  # S3
        message = "Access Denied"
        body = f"<Error><Code>AccessDenied</Code><Message>{message}</Message><RequestId>{request_id}</RequestId></Error>"
        status, headers = 403, {"Content-Type": "application/xml"}
    else:  # query services (IAM, STS, CloudFormation…)
        message = refusal_message(principal, decision)
        body = (
            "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
            f"<Message>{escape(message)}</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
        )
        status, headers = 403, {"Content-Type": "text/xml"}
    return AWSResponse(request.url, status, headers, MockRawResponse(body))


# --- DryRun and the encoded authorization failure message -------------------------------------

DRY_RUN_MESSAGE = "Request would have succeeded, but DryRun flag is set."
ENCODED_PREFIX = "gpf1."  # an encoded message the engine made; AWS's are opaque, STS alone reads them


def encoded_failure(principal: Principal, decision: Decision) -> str:
    """The decision as STS DecodeAuthorizationMessage tells it: allowed, explicitDeny, the context."""
    authorization = decision.authorization
    document = {
        "allowed": False,
        "explicitDeny": decision.result == EXPLICITLY_DENIED,
        "matchedStatements": {"items": []},
        "failures": {"items": []},
        "context": {
            "principal": {"arn": principal.arn},
            "action": authorization.action,
            "resource": authorization.resource,
            "conditions": {"items": [
                {"key": key, "values": {"items": [{"value": str(v)} for v in (value if isinstance(value, (list, tuple)) else [value])]}}
                for key, value in sorted(authorization.context.items())
            ]},
        },
    }
    packed = zlib.compress(json.dumps(document, separators=(",", ":")).encode())
    return ENCODED_PREFIX + base64.urlsafe_b64encode(packed).decode().rstrip("=")


def decoded_failure(encoded: str) -> dict:
    """STS DecodeAuthorizationMessage on a message the engine encoded; ValueError on anything else."""
    if not encoded.startswith(ENCODED_PREFIX):
        raise ValueError("not an encoded authorization failure message")
    body = encoded[len(ENCODED_PREFIX):]
    try:
        return json.loads(zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))
    except (ValueError, zlib.error) as error:
        raise ValueError("not an encoded authorization failure message") from error


def _missing_instance(world: World, operation: str, params: dict, region: str) -> str | None:
    """An instance a DryRun TerminateInstances or CreateTags names that does not exist: EC2 cannot
    authorize against it and answers NotFound instead."""
    if operation == "TerminateInstances":
        ids = params.get("InstanceIds") or ()
    elif operation == "CreateTags":
        ids = [r for r in params.get("Resources") or () if r.startswith("i-")]
    else:
        return None
    return next((i for i in ids if world.ec2_resource(region, "instance", i) is None), None)


def _ec2_error(request, status: int, code: str, message: str):
    from botocore.awsrequest import AWSResponse
    from moto.core.botocore_stubber import MockRawResponse

    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
        f"<Message>{escape(message)}</Message></Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
    )
    return AWSResponse(request.url, status, {"Content-Type": "text/xml;charset=UTF-8"}, MockRawResponse(body))


def _missing_template(world: World, operation: str, params: dict, region: str) -> str | None:
    """The launch template a DryRun fleet or template-version call names, when it does not exist."""
    if operation == "CreateFleet":
        specs = [c.get("LaunchTemplateSpecification") or {} for c in params.get("LaunchTemplateConfigs") or ()]
    elif operation in ("CreateLaunchTemplateVersion", "DeleteLaunchTemplateVersions"):
        specs = [params]
    else:
        return None
    for spec in specs:
        if world.launch_template(region, spec.get("LaunchTemplateId"), spec.get("LaunchTemplateName"), None) is None:
            return spec.get("LaunchTemplateName") or spec.get("LaunchTemplateId") or ""
    return None


def _dry_run_answer(request, world: World, operation: str, params: dict, region: str):
    missing = _missing_instance(world, operation, params, region)
    if missing is not None:
        return _ec2_error(request, 400, "InvalidInstanceID.NotFound", f"The instance ID '{missing}' does not exist")
    template = _missing_template(world, operation, params, region)
    if template is not None:
        return _ec2_error(request, 400, "InvalidLaunchTemplateName.NotFoundException",
                          f"The specified launch template, with template name {template}, does not exist.")
    return _ec2_error(request, 412, "DryRunOperation", DRY_RUN_MESSAGE)


def sts_decoding():
    """STS DecodeAuthorizationMessage (moto lacks it) for the messages the engine encodes."""
    from moto.core.responses import ActionResult
    from moto.sts.exceptions import STSClientError
    from moto.sts.responses import TokenResponse

    def decode_authorization_message(response) -> ActionResult:
        try:
            document = decoded_failure(response._get_param("EncodedMessage") or "")
        except ValueError as error:
            raise STSClientError("InvalidAuthorizationMessageException", str(error)) from None
        return ActionResult({"DecodedMessage": json.dumps(document)})

    return mock.patch.object(TokenResponse, "decode_authorization_message", decode_authorization_message, create=True)
