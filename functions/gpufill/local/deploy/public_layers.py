"""AWS's public Powertools layer in the simulated account: the public SSM parameter that names
the layer for a release (CloudFormation resolves it when the stack deploys), and the layer itself
usable by any function, as AWS's public layers are. moto knows only layers its own account published.
"""

from __future__ import annotations

from unittest import mock

from gpufill import constants

# The layer number AWS gives the pinned release in the simulated account.
LOCAL_LAYER_VERSION = 1


def layer_arn(region: str) -> str:
    return constants.powertools_layer_arn(region, LOCAL_LAYER_VERSION)


def publish(region: str) -> None:
    from gpufill.local.deploy.images import put_public_parameter

    put_public_parameter(region, constants.powertools_layer_parameter(), layer_arn(region))


def patches():
    """Functions may carry AWS's public Powertools layers (any version, any region)."""
    from moto.awslambda.models import LambdaFunction

    original = LambdaFunction._get_layers_data
    public = f":{constants.POWERTOOLS_LAYER_ACCOUNT}:layer:AWSLambdaPowertoolsPython"

    def layers_data(function, arns: list[str]):
        own = [arn for arn in arns if public not in arn]
        found = original(function, own) if own else []
        return [{"Arn": arn, "CodeSize": 0} for arn in arns if public in arn] + found

    return mock.patch.object(LambdaFunction, "_get_layers_data", layers_data)
