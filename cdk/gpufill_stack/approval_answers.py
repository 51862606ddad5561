"""ApprovalAnswers: the one way a person answers an approval.

- AnswerApproval, a Lambda whose function URL has AuthType AWS_IAM: AWS authenticates the caller
  (SigV4) and checks their grant before the function runs, and hands it the caller's ARN, which
  is what gets recorded as the approver. Its role is the only one that may send task answers.
- The approver managed policy (`gpufill-<env>-approver`): lambda:InvokeFunctionUrl on that URL
  (AuthType AWS_IAM only) and lambda:InvokeFunction through it, which AWS requires of function
  URLs created since October 2025. Attach it to the people and roles who answer; the function
  adds the `approvers` patterns and `separate_approver` on top.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from aws_cdk import CfnOutput
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct
from gpufill import constants

from gpufill_stack.functions import Functions
from gpufill_stack.settings import DeploySettings
from gpufill_stack.task_permissions import ANSWER_TASKS, TaskResources


class ApprovalAnswers(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploySettings,
        resources: TaskResources,
        environment: Mapping[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        functions = Functions(
            self,
            "Functions",
            env=settings.env,
            powertools_layer_version=settings.powertools_layer_version,
            resources=resources,
            environment={
                **environment,
                constants.ENV_APPROVERS: json.dumps(list(settings.approvers)),
                constants.ENV_SEPARATE_APPROVER: "true" if settings.separate_approver else "false",
            },
            tasks=constants.ANSWER_FUNCTIONS,
            specs=ANSWER_TASKS,
            # No probe alias: it records the approver AWS authenticated at the function URL, and an
            # invocation any other way could claim one. It makes no EC2 call a probe could ask about.
            probe_alias=False,
        )
        self.function = functions.functions[constants.ANSWER_APPROVAL_TASK]
        self.url = self.function.add_function_url(auth_type=lambda_.FunctionUrlAuthType.AWS_IAM)
        self.approver_policy = iam.ManagedPolicy(
            self,
            "ApproverPolicy",
            managed_policy_name=constants.approver_policy_name(settings.env),
            description=f"gpufill ({settings.env}): answer approvals (gpufill approve|reject) through the AnswerApproval URL",
            statements=[
                iam.PolicyStatement(
                    sid="CallTheApprovalUrl",
                    actions=["lambda:InvokeFunctionUrl"],
                    resources=[self.function.function_arn],
                    conditions={"StringEquals": {"lambda:FunctionUrlAuthType": constants.FUNCTION_URL_AUTH_TYPE}},
                ),
                iam.PolicyStatement(
                    sid="InvokeThroughTheUrl",
                    actions=["lambda:InvokeFunction"],
                    resources=[self.function.function_arn],
                    conditions={"Bool": {"lambda:InvokedViaFunctionUrl": "true"}},
                ),
            ],
        )
        CfnOutput(scope, constants.OUTPUT_ANSWER_APPROVAL_URL, value=self.url.url,
                  description="gpufill approve|reject send SigV4-signed answers here (AuthType AWS_IAM)")
        CfnOutput(scope, constants.OUTPUT_APPROVER_POLICY_ARN, value=self.approver_policy.managed_policy_arn,
                  description="Attach to the principals who answer approvals")
