"""The instance's own calls (startup.sh), judged by the instance role as AWS would.

On AWS, startup.sh runs with the credentials of the instance profile's role: it reads
`scripts/startup.sh` from the startup bucket, then tags its own instance with each step it
reaches. The simulated market plays those calls on the modelled clock; before each takes
effect it is judged here, and a refused one does not happen (startup.sh goes on without it, as
it does on AWS when a call fails).
"""

from __future__ import annotations

from gpufill import constants
from gpufill.local.iam.authorizations import Call
from gpufill.local.iam import trust
from gpufill.local.iam.enforcement import refusal
from gpufill.local.iam.principals import principal


class InstanceCalls:
    def __init__(self, engine):
        self.engine = engine

    def may(self, region: str, instance, service: str, operation: str, params: dict) -> bool:
        engine = self.engine
        if not engine.judge_iam or engine.iam is None:
            return True
        deployment = self._deployment_of(instance)
        role = engine.roles.get(deployment.app.instance_role.arn, deployment.app.instance_role)
        if trust.refusal(engine, role, trust.EC2) is not None:
            return False  # EC2 cannot give the instance the profile's role: the instance has no credentials
        caller = principal(role, instance.id, engine.account)
        source = f"arn:aws:ec2:{region}:{engine.account}:instance/{instance.id}"
        caller = type(caller)(**{**caller.__dict__, "source_instance_arn": source})
        call = Call(service, operation, params, region, engine.account)
        from gpufill.local.iam.world import engine_world

        return refusal(caller, call, engine_world(engine), engine.iam) is None

    def startup_bucket(self, instance) -> str:
        deployment = self._deployment_of(instance)
        return deployment.app.home.functions["LaunchBatch"].environment[constants.ENV_STARTUP_BUCKET]

    def _deployment_of(self, instance):
        """The deployment whose launch tagged the instance (its instance profile is that one's)."""
        env = dict(instance.ec2_backend.tags.get(instance.id, {})).get(constants.TAG_DEPLOYMENT)
        return self.engine.deployments.get(env) or next(iter(self.engine.deployments.values()))
