"""Which actions each deployed principal (a function's task, StateMachine, Instance, Scheduler, the
event-forwarding role) was allowed in one engine: what the engine leaves in $GPUFILL_IAM_USAGE for
`gpufill local iam-report --usage DIR`, and the names report.py gives the roles."""

from __future__ import annotations

from collections import defaultdict

from gpufill import constants


def usage_of(engine) -> dict[str, list[str]]:
    """Which actions each principal (function task, StateMachine, Instance) was allowed, in one engine."""
    names = principal_names(engine)
    used: dict[str, set[str]] = defaultdict(set)
    for j in list(engine.iam.seen):
        if j.result == "Allowed":
            used[names.get(j.role_arn, j.principal)].add(j.action)
    return {principal: sorted(actions) for principal, actions in used.items()}


def principal_names(engine) -> dict[str, str]:
    names = {f.role.arn: f.task for f in engine.functions.values()}
    for deployment in engine.deployments.values():
        names[deployment.app.state_machine_role.arn] = "StateMachine"
        names[deployment.app.instance_role.arn] = "Instance"
        names[deployment.app.scheduler_role.arn] = "Scheduler"
        for arn, role in engine.roles.items():
            if role.name.startswith(constants.forwarding_role_name(deployment.env, "")):
                names[arn] = constants.FORWARDING_PRINCIPAL  # one per region, from one template
    return names
