from __future__ import annotations

import pytest

from gpufill.local.iam.evaluator import Evaluator


@pytest.fixture(scope="session")
def evaluator():
    judge = Evaluator()
    yield judge
    judge.close()
