import json
import warnings

import pytest

from tests.support import EXAMPLES

warnings.filterwarnings("ignore", message="No application metrics to publish")


@pytest.fixture
def example():
    def load(relative: str) -> dict:
        return json.loads((EXAMPLES / relative).read_text())

    return load
