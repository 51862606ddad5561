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


def test_the_functions_run_the_powertools_release_the_tests_ran_with():
    # The layer is found through AWS's public parameter for this release (resolved at deploy).
    assert constants.POWERTOOLS_VERSION == pinned_powertools(), (
        f"gpufill.constants.POWERTOOLS_VERSION is {constants.POWERTOOLS_VERSION}, but pyproject.toml pins "
        f"{pinned_powertools()}: bump both together"
    )
    assert constants.powertools_layer_parameter().endswith(f"/{pinned_powertools()}")
