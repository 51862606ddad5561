"""`gpufill local serve`: the local engine behind an HTTP endpoint, so the real AWS CLI and
gpufill's AWS verbs (with --endpoint-url) work against a simulated account.

The endpoint is moto's server application running in this process, next to the engine: every
request reaches the same moto backends the engine set up, so executions started over HTTP run
the same in-process Lambda handlers against the same market. It listens on 127.0.0.1 only.

moto's CloudFormation needs packages gpufill does not install, and no template is deployed
here; the endpoint answers DescribeStacks for the stack a deployment `local` would have,
`gpufill-local`, with the outputs the CDK app gives it, so the verbs find this deployment
exactly as they find one on AWS.
"""

from __future__ import annotations

import json
import threading
import uuid
from datetime import UTC, datetime
from typing import Any, Callable
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from gpufill import constants
from gpufill.local.function_urls import SERVED_PREFIX

LOOPBACK = "127.0.0.1"
# The modelled clock's own path beside the AWS APIs; at most 200 days at a time (a block lasts 182).
CLOCK_PATH = "/_gpufill/clock"
MAX_ADVANCE_SECONDS = 200 * 86400
CLOUDFORMATION_NS = "http://cloudformation.amazonaws.com/doc/2010-05-15/"


class LocalEndpoint:
    """Serves `engine`'s account on http://127.0.0.1:PORT until stop(); port 0 picks a free one."""

    def __init__(self, engine, port: int = 0):
        self.engine = engine
        self.requested_port = port
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def outputs(self) -> dict[str, str]:
        """The stack's outputs as the CDK app gives them, resolved for this account; a function URL
        is the address this endpoint serves it at (<endpoint>/lambda-url/<url id>/)."""
        home = self.engine.deployments[self.engine_env()].app.home
        served = {u.url: f"{self.url}{SERVED_PREFIX}{u.url_id}/" for u in home.function_urls}
        return {k: served.get(str(v), str(v)) for k, v in home.outputs.items()}

    def engine_env(self) -> str:
        from gpufill.local import engine

        return getattr(self.engine, "env", None) or engine.ENV_NAME

    def start(self) -> LocalEndpoint:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        app = _with_stack(DomainDispatcherApplication(create_backend_app), self)
        self._server = make_server(LOOPBACK, self.requested_port, app, threaded=True, request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="gpufill-local-endpoint", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> LocalEndpoint:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _with_stack(app: Callable, endpoint: LocalEndpoint) -> Callable:
    """Answers CloudFormation calls (DescribeStacks of gpufill-<env>); everything else goes to moto."""

    def serve(environ: dict[str, Any], start_response: Callable) -> Any:
        if environ.get("PATH_INFO") == CLOCK_PATH:
            return _clock(environ, start_response, endpoint)
        if environ.get("PATH_INFO", "").startswith(SERVED_PREFIX):
            return _function_url(environ, start_response, endpoint)
        if _service(environ) != "cloudformation":
            return app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        form = {k: v[0] for k, v in parse_qs(environ["wsgi.input"].read(length).decode()).items()}
        stack = constants.stack_name(endpoint.engine_env())
        if form.get("Action") != "DescribeStacks":
            return _reply(start_response, 400, _error("InvalidAction", f"the local endpoint answers DescribeStacks of {stack} only"))
        # A stack is regional: asked in another region (or in one that does not exist), it is not there.
        home = endpoint.engine.state_machine_arn.split(":")[3]
        if form.get("StackName", stack) != stack or _scope(environ)[2:3] != [home]:
            return _reply(start_response, 400, _error("ValidationError", f"Stack with id {form.get('StackName', stack)} does not exist"))
        return _reply(start_response, 200, _describe_stacks(stack, endpoint))

    return serve


def _clock(environ: dict[str, Any], start_response: Callable, endpoint: LocalEndpoint) -> list[bytes]:
    """The engine's modelled clock (not an AWS API): GET reads it; POST {"advance_seconds": N}
    lets N modelled seconds pass, so schedules, approval deadlines and Capacity Block starts and
    ends happen as they would (`gpufill local clock advance`)."""
    from gpufill.adapters import clock

    if environ.get("REQUEST_METHOD") == "POST":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        try:
            seconds = json.loads(environ["wsgi.input"].read(length) or b"{}").get("advance_seconds")
        except (ValueError, AttributeError):
            seconds = None
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 < seconds <= MAX_ADVANCE_SECONDS:
            return _json_reply(start_response, 400, {"message": f"advance_seconds must be a number of seconds from 1 to {MAX_ADVANCE_SECONDS}"})
        endpoint.engine.advance(float(seconds))
    now = clock.now()
    return _json_reply(start_response, 200, {"now": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "elapsed_seconds": endpoint.engine.elapsed})


def _json_reply(start_response: Callable, status: int, body: dict) -> list[bytes]:
    data = json.dumps(body).encode()
    start_response(f"{status} {'OK' if status == 200 else 'Bad Request'}",
                   [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def _function_url(environ: dict[str, Any], start_response: Callable, endpoint: LocalEndpoint) -> list[bytes]:
    """A request to a function URL, served by the engine as AWS serves it (local/function_urls.py)."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    headers = {key[5:].replace("_", "-").lower(): value for key, value in environ.items() if key.startswith("HTTP_")}
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers[key.replace("_", "-").lower()] = environ[key]
    query = f"?{environ['QUERY_STRING']}" if environ.get("QUERY_STRING") else ""
    url = f"http://{environ.get('HTTP_HOST', LOOPBACK)}{environ['PATH_INFO']}{query}"
    status, reply_headers, text = endpoint.engine.call_function_url(url, method=environ["REQUEST_METHOD"], headers=headers, body=body)
    data = text.encode()
    start_response(f"{status} {'OK' if status == 200 else 'Error'}", [*reply_headers.items(), ("Content-Length", str(len(data)))])
    return [data]


def _service(environ: dict[str, Any]) -> str | None:
    """The signing service in the SigV4 Authorization header."""
    scope = _scope(environ)
    return scope[3] if len(scope) >= 5 else None


def _scope(environ: dict[str, Any]) -> list[str]:
    """The SigV4 credential scope, Credential=KEY/DATE/REGION/SERVICE/aws4_request, split on /."""
    authorization = environ.get("HTTP_AUTHORIZATION", "")
    if "Credential=" not in authorization:
        return []
    return authorization.split("Credential=", 1)[1].split(",", 1)[0].split("/")


def _describe_stacks(stack: str, endpoint: LocalEndpoint) -> str:
    region = endpoint.engine.state_machine_arn.split(":")[3]
    account = endpoint.engine.state_machine_arn.split(":")[4]
    outputs = "".join(
        f"<member><OutputKey>{escape(k)}</OutputKey><OutputValue>{escape(v)}</OutputValue></member>"
        for k, v in endpoint.outputs().items()
    )
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    stack_id = f"arn:aws:cloudformation:{region}:{account}:stack/{stack}/{uuid.uuid5(uuid.NAMESPACE_URL, stack)}"
    return (
        f'<DescribeStacksResponse xmlns="{CLOUDFORMATION_NS}"><DescribeStacksResult><Stacks><member>'
        f"<StackName>{stack}</StackName><StackId>{stack_id}</StackId><StackStatus>CREATE_COMPLETE</StackStatus>"
        f"<CreationTime>{created}</CreationTime><Outputs>{outputs}</Outputs></member></Stacks>"
        f"</DescribeStacksResult><ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
        "</DescribeStacksResponse>"
    )


def _error(code: str, message: str) -> str:
    return (
        f'<ErrorResponse xmlns="{CLOUDFORMATION_NS}"><Error><Type>Sender</Type><Code>{code}</Code>'
        f"<Message>{escape(message)}</Message></Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
    )


def _reply(start_response: Callable, status: int, body: str) -> list[bytes]:
    data = body.encode()
    start_response(
        f"{status} {'OK' if status == 200 else 'Bad Request'}",
        [("Content-Type", "text/xml"), ("Content-Length", str(len(data)))],
    )
    return [data]
