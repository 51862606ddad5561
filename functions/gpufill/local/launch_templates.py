"""Launch template versions as EC2 keeps them, where moto does not (moto 5.2.5 has no
DeleteLaunchTemplateVersions and no version quota):

- DeleteLaunchTemplateVersions deletes versions other than the default; a deleted number is
  never reused (later versions keep counting up), and describing or launching from it answers
  InvalidLaunchTemplateId.VersionNotFound. The default version, a version that does not exist
  and an unknown template are answered per version in UnsuccessfullyDeletedLaunchTemplateVersions
  (EC2 gives 200 for the call), at most 200 versions a call.
- A template holds at most `limits.MAX_LAUNCH_TEMPLATE_VERSIONS` (10,000) versions, deleted ones
  not counted; CreateLaunchTemplateVersion beyond it answers VersionLimitExceeded.
- A CreateLaunchTemplateVersion ClientToken seen before answers the first call's version even
  when that version was deleted since (local/fleet_api.py keeps the answer): EC2 does not document
  this case, and this is its rule for every other token (a RunInstances token answers its
  instance after it was terminated). A CreateFleet sent again with its token is answered from
  the token before its launch template is looked at, so a retried step whose version was deleted
  still reads back the fleet it launched.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any
from unittest import mock

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError, InvalidLaunchTemplateVersionNotFound
from moto.ec2.models.launch_templates import LaunchTemplate, LaunchTemplateBackend
from moto.ec2.responses import EC2Response

from gpufill.local import limits

MAX_DELETE = 200


def deleted(template: LaunchTemplate) -> set[int]:
    return template.__dict__.setdefault("gpufill_deleted", set())


def live_versions(template: LaunchTemplate) -> list:
    gone = deleted(template)
    return [v for v in template.versions if v.number not in gone]


def limited(original_create_version):
    """CreateLaunchTemplateVersion refused at the template's version quota."""

    def create_version(response) -> ActionResult:
        template = _template(response.ec2_backend, response._get_param("LaunchTemplateId"), response._get_param("LaunchTemplateName"))
        if template is not None and len(live_versions(template)) >= limits.MAX_LAUNCH_TEMPLATE_VERSIONS:
            raise EC2ClientError(
                "VersionLimitExceeded",
                f"You have reached the maximum number of versions ({limits.MAX_LAUNCH_TEMPLATE_VERSIONS}) "
                f"for launch template {template.id}. Delete versions you no longer use.",
            )
        return original_create_version(response)

    return create_version


def _template(backend, template_id: str | None, name: str | None) -> LaunchTemplate | None:
    template_id = template_id or backend.launch_template_name_to_ids.get(name or "")
    return backend.launch_templates.get(template_id or "")


def delete_launch_template_versions(response) -> ActionResult:
    template_id, name = response._get_param("LaunchTemplateId"), response._get_param("LaunchTemplateName")
    asked = [str(v) for v in response._get_param("Versions", [])]
    if bool(template_id) == bool(name):
        raise EC2ClientError("MissingParameter", "Specify either the launch template ID or the launch template name, but not both.")
    if not asked or len(asked) > MAX_DELETE:
        raise EC2ClientError("InvalidParameterValue", f"Specify from 1 to {MAX_DELETE} launch template versions.")
    response.error_on_dryrun()
    template = _template(response.ec2_backend, template_id, name)
    done: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for version in asked:
        if template is None:
            code = "launchTemplateIdDoesNotExist" if template_id else "launchTemplateNameDoesNotExist"
            failed.append(_failure(template_id, name, version, code, "The specified launch template does not exist."))
            continue
        number = int(version) if version.isdigit() else 0
        if not 1 <= number <= len(template.versions) or number in deleted(template):
            failed.append(_failure(template.id, template.name, version, "launchTemplateVersionDoesNotExist",
                                   "The specified launch template version does not exist."))
        elif number == template.default_version_number:
            failed.append(_failure(template.id, template.name, version, "unexpectedError",
                                   "Cannot delete the default version of a launch template."))
        else:
            deleted(template).add(number)
            done.append({"LaunchTemplateId": template.id, "LaunchTemplateName": template.name, "VersionNumber": number})
    return ActionResult({"SuccessfullyDeletedLaunchTemplateVersions": done, "UnsuccessfullyDeletedLaunchTemplateVersions": failed})


def _failure(template_id, name, version: str, code: str, message: str) -> dict[str, Any]:
    item: dict[str, Any] = {"ResponseError": {"Code": code, "Message": message}}
    if template_id:
        item["LaunchTemplateId"] = template_id
    if name:
        item["LaunchTemplateName"] = name
    if version.isdigit():
        item["VersionNumber"] = int(version)
    return item


def patches() -> ExitStack:
    stack = ExitStack()
    original_get = LaunchTemplate.get_version

    def get_version(template: LaunchTemplate, num: Any):
        if str(num).lower() == "$latest":
            return template.latest_version()
        if str(num).isdigit() and int(num) in deleted(template):
            raise InvalidLaunchTemplateVersionNotFound(template_id=template.id, version=num)
        return original_get(template, num)

    def latest_version(template: LaunchTemplate):
        return live_versions(template)[-1]

    original_describe = LaunchTemplateBackend.describe_launch_template_versions

    def describe_versions(backend, *args, **kwargs):
        found = original_describe(backend, *args, **kwargs)
        return [(template, version) for template, version in found if version.number not in deleted(template)]

    stack.enter_context(mock.patch.object(LaunchTemplate, "get_version", get_version))
    stack.enter_context(mock.patch.object(LaunchTemplate, "latest_version", latest_version))
    stack.enter_context(mock.patch.object(LaunchTemplateBackend, "describe_launch_template_versions", describe_versions))
    stack.enter_context(
        mock.patch.object(EC2Response, "delete_launch_template_versions", delete_launch_template_versions, create=True)
    )
    return stack
