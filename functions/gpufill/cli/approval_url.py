"""`gpufill approve|reject` send their answer to the deployment's AnswerApproval function URL.

The request is signed with SigV4 for the service `lambda` with the caller's own credentials, as
AWS requires of a URL with AuthType AWS_IAM; AWS authenticates the caller from it and hands the
function the caller's ARN, which the approval records. Nothing here decides anything: the reply
is the function's (or AWS's own 403 when the caller may not call the URL at all).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import urlsplit

from gpufill import constants

TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict

    @property
    def refused_by_aws(self) -> bool:
        """AWS's own refusal (signature or IAM): the function never ran."""
        return self.status == 403 and "Message" in self.body and "message" not in self.body


class NoAnswerUrl(Exception):
    """The deployment's stack has no AnswerApprovalUrl output (deployed before answers went through it)."""


def url_of(outputs: dict[str, str]) -> str:
    url = outputs.get(constants.OUTPUT_ANSWER_APPROVAL_URL)
    if not url:
        raise NoAnswerUrl(constants.OUTPUT_ANSWER_APPROVAL_URL)
    return url


def region_of(url: str, default: str) -> str:
    """https://<id>.lambda-url.<region>.on.aws/ -> <region>; a served local URL signs for `default`."""
    host = urlsplit(url).hostname or ""
    parts = host.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "lambda-url" else default


def send(session, url: str, answer: dict) -> Reply:
    """POST `answer` as JSON to `url`, SigV4-signed (service lambda) with `session`'s credentials."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.httpsession import URLLib3Session

    credentials = session.get_credentials()
    if credentials is None:
        from botocore.exceptions import NoCredentialsError

        raise NoCredentialsError()
    request = AWSRequest(method="POST", url=url, data=json.dumps(answer).encode(), headers={"Content-Type": "application/json"})
    SigV4Auth(credentials.get_frozen_credentials(), "lambda", region_of(url, session.region_name)).add_auth(request)
    response = URLLib3Session(timeout=TIMEOUT_SECONDS).send(request.prepare())
    try:
        body = json.loads(response.content or b"{}")
    except json.JSONDecodeError:
        body = {"message": response.text[:500]}
    return Reply(response.status_code, body if isinstance(body, dict) else {"message": str(body)})
