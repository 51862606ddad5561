"""Every instance script passes shellcheck (the Debian package; `make test` installs it)."""

import shutil
import subprocess

import pytest
from startup_sandbox import STARTUP_DIR, STUB

SCRIPTS = sorted(STARTUP_DIR.glob("*.sh")) + [STUB]


def test_startup_holds_the_instance_scripts():
    assert {p.name for p in STARTUP_DIR.glob("*.sh")} >= {"bootstrap.sh", "startup.sh", "idle-watchdog.sh"}


@pytest.mark.skipif(
    shutil.which("shellcheck") is None,
    reason="shellcheck is not installed (apt-get install -y shellcheck; `make test` does it)",
)
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shellcheck_passes(script):
    result = subprocess.run(
        ["shellcheck", "--shell=bash", "--severity=style", str(script)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
