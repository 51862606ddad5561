"""AnswerApproval: the function URL (AuthType AWS_IAM) that `gpufill approve|reject` call.

AWS checks the request's signature and the caller's lambda:InvokeFunctionUrl grant before this
runs, and hands over the caller's ARN as it authenticated it; a refused caller never gets here.
This function adds the deployment's `approvers` patterns and `separate_approver`, then answers
with gpufill.approve (resolve the approval, claim it on its item, SendTaskSuccess, and settle a lost
reply from the execution's history), recording that ARN as the approver. Only this function's role may send task answers, so no one can answer as someone else.

Answers, as JSON with `message`: 200 answered (what the answer did: reply_fields); 400 bad input
(the field named); 403 not an approver here; 409 nothing changed: ambiguous (`choices` lists the
approvals), already answered (saying what the first answer did), expired or not pending;
502 AWS failed (an answer whose reply was lost stays claimed; the caller settles it).
"""

from __future__ import annotations

import json
import os

from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from gpufill import approve
from gpufill.adapters import clock, run_owner
from gpufill.adapters.aws import client
from gpufill.constants import ENV_APPROVERS, ENV_SEPARATE_APPROVER
from gpufill.handlers.observability import logger, metrics, tracer
from gpufill.policy import answers, approvers


# A lost SendTaskSuccess reply is settled for this long: well inside the function's 30 s timeout,
# itself inside the CLI's 60 s request timeout, so the CLI's own settling never races this one. The
# function returns as soon as it knows the answer was taken (follow=False): what the answer goes on
# to do (buy, terminate) is followed by the CLI (approve.follow_effect), not billed here.
SETTLE_SECONDS = 15.0


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    caller = approvers.caller_arn(event)
    if caller is None:  # only a URL with AuthType NONE, or a direct invoke, comes without one
        return _reply(403, "the request carries no IAM identity: call the function URL with a SigV4-signed request")
    try:
        asked = approvers.parse_answer(event)
    except approvers.BadAnswer as error:
        return _reply(400, f"{error}; nothing changed")
    logger.set_correlation_id(asked.approval)  # until the approval is found: then the request it concerns
    # The deployment's own account (the function's), never the caller's: the default admits only it.
    account = context.invoked_function_arn.split(":")[4]
    patterns = approvers.parse_approvers(os.environ.get(ENV_APPROVERS)) or approvers.default_approvers(account)
    if not approvers.may_answer(caller, patterns):
        logger.warning("approver refused", extra={"caller": caller, "approval": asked.approval})
        return _reply(403, f"{caller} is not one of this deployment's approvers ({', '.join(patterns)}); nothing changed")
    now = clock.now()
    try:
        # One approval, resolved as `gpufill approve` resolves it (id, execution name or ARN, request id).
        item = approve.find(asked.approval, None, now)
        logger.set_correlation_id(answers.target_of(item).get("request_id") or item["execution_name"])
        if os.environ.get(ENV_SEPARATE_APPROVER) == "true":
            refused = _requester_refused(caller, item["execution_name"])
            if refused:
                return _reply(403, refused)
        done = approve.answer(
            answers.approval_id(item), asked.decision, approver=caller, reason=asked.reason,
            sfn=client("stepfunctions"), table=None, now=now, settle_seconds=SETTLE_SECONDS, follow=False,
        )
    except approve.Ambiguous as error:
        return _reply(409, str(error), {"choices": [
            {"approval_id": answers.approval_id(i), "asks": approve.describe(i), "deadline": i.get("deadline")}
            for i in error.items
        ]})
    except approve.ApprovalError as error:
        return _reply(409, str(error))
    except approve.AnswerUnknown as error:  # claimed, reply lost, history unreadable: the caller settles it
        logger.warning("answer unknown", extra={"approval": asked.approval, "error": str(error)})
        return _reply(502, str(error))
    except (BotoCoreError, ClientError) as error:
        logger.exception("answer failed")
        return _reply(502, f"AWS failed while answering {asked.approval!r}: {error}")
    logger.info("approval answered", extra={"approval": done.approval_id, "decision": asked.decision, "approver": caller})
    metrics.add_metric(name=f"Answer{asked.decision.capitalize()}", unit="Count", value=1)
    return _reply(200, "answered", {**reply_fields(done), "answered_at": now.isoformat(timespec="seconds")})


def reply_fields(done: approve.Answered) -> dict:
    """What the answer did, as `gpufill approve|reject` prints it (answered_lines, --json)."""
    effect = done.effect
    return {
        "approval_id": done.approval_id,
        "kind": done.kind,
        "execution": done.execution_name,
        "decision": done.decision,
        "approver": done.approver,
        "answered_by": done.approver,
        "reason": done.reason,
        "approval_for": done.item.get("approval_for") or "teardown",
        "instance_ids": list(done.instance_ids),
        "nothing_to_do": done.nothing_to_do,
        "settled_after": done.settled_after,
        "effect": None if effect is None else {
            "done": effect.done, "text": effect.text, "bought": effect.bought, "terminated": effect.terminated,
        },
    }


def _requester_refused(caller: str, approval: str) -> str | None:
    """separate_approver: the refusal when `caller` started the run the approval is about."""
    started_by = run_owner.started_by(approval)
    if started_by is None:
        return (f"separate_approver is on and AWS has no record yet of who started {approval!r} "
                "(CloudTrail can take minutes): try again shortly; nothing changed")
    if approvers.same_principal(caller, started_by):
        return (f"separate_approver is on: {caller} started {approval!r} and may not answer it; "
                "another approver must; nothing changed")
    return None


def _reply(status: int, message: str, fields: dict | None = None) -> dict:
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps({"message": message, **(fields or {})}),
    }
