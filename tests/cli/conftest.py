"""The served local endpoint the CLI tests talk to, one per test module, on the module's MARKET."""

import pytest

from gpufill.cli import aws
from tests.cli.endpoint import served


@pytest.fixture(scope="module")
def endpoint(request, tmp_path_factory):
    # As `gpufill local serve` runs it: the handlers' log lines kept off stdout.
    with served(request.module.MARKET, tmp_path_factory.mktemp("serve") / "lambda.log") as endpoint:
        yield endpoint


@pytest.fixture
def deployment(endpoint, monkeypatch):
    """The flags that point a verb at the served endpoint."""
    monkeypatch.setattr(aws, "POLL_SECONDS", 0.05)
    return ["--env", "local", "--region", "us-east-1", "--endpoint-url", endpoint.url]
