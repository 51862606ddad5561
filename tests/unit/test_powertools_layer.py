"""The Powertools public layer the stack attaches carries the library version the tests ran with."""

import re
import tomllib
from importlib import metadata
from pathlib import Path

from gpufill import constants

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def pinned_powertools() -> str:
    project = tomllib.loads(PYPROJECT.read_text()).get("project")
    if project is None:  # a copy of the tests outside the checkout (the mutation run's staging)
        return metadata.version("aws-lambda-powertools")
    dependencies = project["dependencies"]
    [pin] = [d for d in dependencies if d.startswith("aws-lambda-powertools")]
    match = re.search(r"==\s*([0-9][0-9.]*)", pin)
    assert match, f"aws-lambda-powertools must be pinned exactly (==) in pyproject.toml, not {pin!r}"
    return match.group(1)


def test_the_layer_version_carries_the_pinned_powertools_release():
    carried = constants.POWERTOOLS_LAYER_LIBRARY_VERSIONS.get(constants.POWERTOOLS_LAYER_VERSION)
    assert carried is not None, (
        f"layer version {constants.POWERTOOLS_LAYER_VERSION} is not in POWERTOOLS_LAYER_LIBRARY_VERSIONS: "
        "add which Powertools release it carries"
    )
    assert carried == pinned_powertools(), (
        f"layer {constants.POWERTOOLS_LAYER_VERSION} carries Powertools {carried}, but pyproject.toml pins "
        f"{pinned_powertools()}: bump both together"
    )


def test_each_layer_version_carries_one_release_and_releases_only_grow():
    versions = sorted(constants.POWERTOOLS_LAYER_LIBRARY_VERSIONS.items())
    releases = [tuple(int(p) for p in v.split(".")) for _, v in versions]
    assert releases == sorted(releases) and len(set(releases)) == len(releases)
