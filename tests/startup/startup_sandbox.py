"""A sandbox for the instance scripts: stub commands first on PATH, every path in tmp_path.

No root, network, Docker or AWS: each command the scripts call is tests/startup/stub_command.sh
under that command's name, and it records its argv so tests can read the calls in order.
(A uniquely named module rather than conftest, so `import` never finds another directory's.)
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STARTUP_DIR = REPO / "startup"
STUB = Path(__file__).with_name("stub_command.sh")

# Every command the scripts run that would touch the machine, the network or AWS.
STUBBED_COMMANDS = (
    "aws", "curl", "docker", "lsblk", "mkfs.ext4", "mount", "mountpoint", "nvidia-smi", "systemctl",
)

INSTANCE_STORE_DISKS = (
    "/dev/nvme0n1 Amazon Elastic Block Store\n"
    "/dev/nvme1n1 Amazon EC2 NVMe Instance Storage\n"
)


@dataclass
class Sandbox:
    root: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def calls_file(self) -> Path:
        return self.root / "calls.log"

    @property
    def state(self) -> Path:
        return self.root / "state"

    def path(self, name: str) -> Path:
        return Path(self.env[name])

    def calls(self) -> list[list[str]]:
        if not self.calls_file.exists():
            return []
        return [line.split("\t") for line in self.calls_file.read_text().splitlines()]

    def calls_to(self, *prefix: str) -> list[list[str]]:
        return [c for c in self.calls() if c[: len(prefix)] == list(prefix)]

    def index(self, *prefix: str) -> int:
        """Position of the first call starting with prefix."""
        for i, call in enumerate(self.calls()):
            if call[: len(prefix)] == list(prefix):
                return i
        raise AssertionError(f"no call {' '.join(prefix)!r} in:\n{self.calls_file.read_text()}")

    def forget_calls(self) -> None:
        self.calls_file.unlink(missing_ok=True)

    def run(self, script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(STARTUP_DIR / script), *args],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )


def make_sandbox(tmp_path: Path) -> Sandbox:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command in STUBBED_COMMANDS:
        (bin_dir / command).symlink_to(STUB)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "disks").write_text(INSTANCE_STORE_DISKS)
    machine = tmp_path / "machine"
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "STUB_CALLS": str(tmp_path / "calls.log"),
        "STUB_STATE": str(tmp_path / "state"),
        "STUB_SCRIPTS_DIR": str(STARTUP_DIR),
        "STUB_SLOW_SECONDS": "0.5",
        "GPUFILL_NVME_WAIT_SECONDS": "0",
        "GPUFILL_LOG_FILE": str(machine / "var/log/gpufill-startup.log"),
        "GPUFILL_NVME_DIR": str(machine / "opt/dlami/nvme"),
        "GPUFILL_DOCKER_DIR": str(machine / "var/lib/docker"),
        "GPUFILL_CONTAINERD_DIR": str(machine / "var/lib/containerd"),
        "GPUFILL_HOME": str(machine / "opt/gpufill"),
        "GPUFILL_STATE_DIR": str(machine / "var/lib/gpufill"),
        "GPUFILL_SYSTEMD_DIR": str(machine / "etc/systemd/system"),
    }
    return Sandbox(root=tmp_path, env=env)
