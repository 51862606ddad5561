"""The public Deep Learning AMI of the simulated account: AWS's image and the public SSM parameter
that names the latest one, in every region (the engine's own, not the CDK app's)."""

from __future__ import annotations

import time

from gpufill import constants

# The id of the public Deep Learning AMI the simulated account starts with, in every region.
LOCAL_AMI = "ami-0abcdef1234567890"
# The Deep Learning Base OSS Nvidia Driver AMI's root snapshot, in GiB: a root volume
# smaller than this is refused by RunInstances (InvalidBlockDeviceMapping), as on EC2.
LOCAL_AMI_ROOT_SNAPSHOT_GIB = 75
# Owner of the public Deep Learning AMIs.
DLAMI_OWNER = "898082745236"


def publish(region: str, image_id: str | None = None) -> str:
    """A public Deep Learning AMI in `region` (a new id unless given), and the public SSM
    parameter naming it as the latest, as AWS publishes a release. Returns the image id."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.amis import Ami
    from moto.ec2.utils import random_ami_id

    backend = ec2_backends[DEFAULT_ACCOUNT_ID][region]
    image_id = image_id or random_ami_id()
    image = Ami(
        backend,
        image_id,
        name=f"Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) local-{len(backend.amis)}",
        owner_id=DLAMI_OWNER,
        owner_alias="amazon",
        public=True,
        architecture="x86_64",
        virtualization_type="hvm",
        root_device_type="ebs",
        root_device_name="/dev/sda1",
        region_name=f"{region}a",
    )
    image.root_snapshot_gib = LOCAL_AMI_ROOT_SNAPSHOT_GIB
    backend.amis[image_id] = image
    put_public_parameter(region, constants.DLAMI_PARAMETER, image_id, data_type="aws:ec2:image")
    return image_id


def put_public_parameter(region: str, name: str, value: str, *, data_type: str = "text") -> None:
    """A new version of one of AWS's public SSM parameters in `region` (moto's API refuses the
    reserved /aws/ prefix to callers, as AWS does, so it is written into moto's backend)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ssm.models import Parameter, ssm_backends

    versions = ssm_backends[DEFAULT_ACCOUNT_ID][region]._parameters[name]
    versions.append(
        Parameter(
            account_id=DEFAULT_ACCOUNT_ID, name=name, value=value, parameter_type="String", description=None,
            allowed_pattern=None, keyid=None, last_modified_date=time.time(), version=len(versions) + 1,
            data_type=data_type,
        )
    )
