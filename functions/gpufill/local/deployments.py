"""gpufill deployed in the simulated account: each deployment (cdk context `env`) as the CDK app
synthesizes it (local/deploy/), the account's clients, and a deployment's function environment
applied around the code that runs as its functions."""

from __future__ import annotations

import json
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gpufill import constants
from gpufill.local.deploy import account as deploy_account
from gpufill.local.deploy import images, public_layers
from gpufill.local.deploy import model as stack_model
from gpufill.local.deploy.images import LOCAL_AMI
from gpufill.local.deploy.model import AppModel

HOME_REGION = constants.LOCAL_HOME_REGION
# Variables of the simulated account itself, the same for every deployment.
ACCOUNT_ENV = {
    "AWS_ACCESS_KEY_ID": "gpufill-local",
    "AWS_SECRET_ACCESS_KEY": "gpufill-local",
    "AWS_SESSION_TOKEN": "gpufill-local",
    "AWS_DEFAULT_REGION": HOME_REGION,
    "AWS_REGION": HOME_REGION,
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
    "POWERTOOLS_DEV": "false",
    # moto's catalogue of ~1,300 public AMIs per region costs half a second per region to
    # build; gpufill launches only the Deep Learning AMI the engine publishes itself.
    "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
}


# Variables that could point a stray client at a real account or endpoint.
SCRUBBED_ENV = ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")


_SHARED_CLIENTS: dict[tuple, Any] = {}
_SHARED_CLIENTS_LOCK = threading.Lock()


def shared_client(service: str, region: str):
    """A boto3 client made as `boto3.client(service, region_name=region)` would make it now, shared
    by every engine of the process: each engine asks for about ten while it deploys, and making
    one costs more than the calls it then sends. A client holds only what it was made from: the
    credentials boto3's default session hands out (moto starts each engine with a new session,
    which reads them from the AWS_* variables), those variables (region, retry settings) and, in
    botocore's legacy retry mode these clients use, no state between calls. So the key is all of
    that, and a client made under other credentials (a test signing as someone else) is another
    client. moto answers every client made after it was imported (its stubber is one of
    botocore's built-in handlers), and an engine only asks while its mock is on."""
    import boto3

    with _SHARED_CLIENTS_LOCK:
        credentials = (boto3.DEFAULT_SESSION or boto3._get_default_session()).get_credentials()
        frozen = None if credentials is None else tuple(credentials.get_frozen_credentials())
        variables = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
        key = (service, region, frozen, variables)
        if key not in _SHARED_CLIENTS:
            _SHARED_CLIENTS[key] = boto3.client(service, region_name=region)
        return _SHARED_CLIENTS[key]


@dataclass
class Deployment:
    """One gpufill deployment (cdk context `env`) in the simulated account, as the CDK app made it."""

    env: str
    app: AppModel
    state_machine_arn: str = ""
    approval_topic_arn: str = ""
    function_arns: dict[str, str] = field(default_factory=dict)

    @property
    def environment(self) -> dict[str, str]:
        """The variables every function of the deployment has (the stack gives them all the same,
        StartRefill one more)."""
        return common_environment(self.app)


class _Environments:
    """Applies a deployment's function Environment to os.environ around each in-process
    invocation. Handlers read os.environ as on Lambda; invocations of one deployment run
    side by side, and one of another deployment waits until they are done."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._applied: dict[str, str] | None = None
        self._active = 0
        # Between invocations os.environ is the first deployment's again, so code outside a
        # handler (a test, the approval helpers) never reads what another deployment left.
        self.default: dict[str, str] | None = None

    @contextmanager
    def applied(self, variables: dict[str, str]):
        with self._changed:
            while self._active and self._applied != variables:
                self._changed.wait()
            if not self._active:
                os.environ.update(variables)
                self._applied = dict(variables)
            self._active += 1
        try:
            yield
        finally:
            with self._changed:
                self._active -= 1
                if not self._active and self.default is not None and self._applied != self.default:
                    os.environ.update(self.default)
                    self._applied = dict(self.default)
                self._changed.notify_all()

    @contextmanager
    def suspended(self):
        """Inside an invocation: let others (of any deployment or function) run meanwhile, as
        they would in containers of their own, then take this one's Environment back."""
        with self._changed:
            mine = dict(self._applied or {})
            self._active -= 1
            if not self._active and self.default is not None and self._applied != self.default:
                os.environ.update(self.default)
                self._applied = dict(self.default)
            self._changed.notify_all()
        try:
            yield
        finally:
            with self._changed:
                while self._active and self._applied != mine:
                    self._changed.wait()
                if not self._active:
                    os.environ.update(mine)
                    self._applied = mine
                self._active += 1


class Deployments:
    """The engine's part that deploys gpufill into the simulated account and reaches the account
    (a part of LocalEngine: it reads the engine's scenario, regions config and definition)."""

    def __init__(self) -> None:
        super().__init__()
        self.deployments: dict[str, Deployment] = {}
        self._environments = _Environments()
        self._clients: dict[tuple[str, str], Any] = {}
        self._clients_lock = threading.Lock()
        # The CDK app synthesized for each deployment (read before the mock starts: a first
        # synth runs the app in a child process).
        self._apps: dict[str, AppModel] = {}
        # Every deployed function by name: its settings as the template gives them.
        self.functions: dict[str, stack_model.Function] = {}
        # Every role deployed (functions', state machines', instances', EventBridge targets'), by
        # ARN, with its resolved policies: what a call made under that role is allowed.
        self.roles: dict[str, stack_model.Role] = {}

    def client(self, service: str, region: str = HOME_REGION):
        """A boto3 client of the simulated account, one per service and region for the engine's
        life (clients are thread-safe; making one costs tens of milliseconds)."""
        key = (service, region)
        with self._clients_lock:
            if key not in self._clients:
                self._clients[key] = shared_client(service, region)
            return self._clients[key]

    def _deploy_account(self) -> None:
        """What every deployment shares: AWS's public Deep Learning AMI and Powertools layer."""
        regions = set(self.scenario.regions) | set(self.regions_config.get("regions", []))
        for region in sorted(regions):
            images.publish(region, LOCAL_AMI)
        for region in sorted(regions | {HOME_REGION}):  # the stack deploys home, wherever the market is
            public_layers.publish(region)

    def _app(self, env: str) -> AppModel:
        if env not in self._apps:
            self._apps[env] = stack_model.load(env)
        return self._apps[env]

    def deploy(self, env: str) -> Deployment:
        """Deploy gpufill as environment `env`: what the CDK app synthesizes with context env=`env`
        (see local/deploy/), the forwarding stack in every region of the regions config but home."""
        if env in self.deployments:
            raise ValueError(f"env: deployment {env!r} already exists in this account")
        app = self._app(env)
        deployed = deploy_account.deploy_app(
            self.client,
            app,
            regions=sorted(set(self.regions_config.get("regions", [])) | {HOME_REGION}),
            regions_config=json.dumps(self.regions_config),
            definition=self.definition.read_text() if self.definition is not None else None,
            schedules=[
                name for name, wanted in (
                    (constants.sweep_schedule_name(env), getattr(self, "sweep", False)),
                    (constants.facts_refresh_schedule_name(env), getattr(self, "facts_refresh", False)),
                ) if wanted
            ],
        )
        deployment = Deployment(
            env,
            app,
            state_machine_arn=deployed.state_machine_arn,
            approval_topic_arn=deployed.approval_topic_arn,
            function_arns=deployed.function_arns,
        )
        self.functions.update(deployed.functions)
        self.roles.update(deployed.roles)
        self.deployments[env] = deployment
        return deployment

    @contextmanager
    def as_deployment(self, env: str):
        """Run the enclosed code (e.g. adapters that read os.environ) as deployment `env`'s functions do."""
        with self._environments.applied(self.deployments[env].environment):
            yield

    # --- the public Deep Learning AMI ------------------------------------------------------

    def publish_newer_ami(self, region: str) -> str:
        """AWS releases a newer Deep Learning AMI in `region`: a new image, and the public
        parameter now names it. Containers that resolved the old one keep it until they
        resolve again (see cold_start). Returns the new image id."""
        return images.publish(region)


def common_environment(app: AppModel) -> dict[str, str]:
    """The variables every gpufill function of `app` is deployed with, name and value alike."""
    environments = [f.environment for f in app.home.functions.values()]
    first = environments[0]
    return {k: v for k, v in first.items() if all(e.get(k) == v for e in environments[1:])}
