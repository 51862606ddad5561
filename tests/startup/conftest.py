"""Fixtures for the instance bootstrap tests (startup/ and gpufill.bootstrap.user_data)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from startup_sandbox import Sandbox, make_sandbox  # noqa: E402


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return make_sandbox(tmp_path)
