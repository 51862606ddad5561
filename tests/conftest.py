import json
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

warnings.filterwarnings("ignore", message="No application metrics to publish")


def zone(price=None, spot=0, on_demand=0, itype="g6.xlarge"):
    stock = {"spot": spot, "on_demand": on_demand}
    if price is not None:
        stock["spot_price"] = price
    return {itype: stock}


@pytest.fixture
def example():
    def load(relative: str) -> dict:
        return json.loads((EXAMPLES / relative).read_text())

    return load
