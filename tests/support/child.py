"""A gpufill command in its own process, as a user runs it: for signals, exit codes and `local serve`.

On a loaded machine a child takes from seconds to minutes to import gpufill and build its
simulated account, so a test waits on what the child prints (its first progress line, the
handlers' log lines, serve's ready line), never for a fixed time, and every wait has one generous
deadline: a child that hangs fails its test with what it printed instead of blocking the run. The
child leads a process group of its own (the CDK synth's Node runtime, when the stack cache is
cold, is in it too), and the group is killed when the test ends, passed or failed, so no
`gpufill local serve` outlives its test.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

from tests.support import ROOT

# Longer than any wait a child asks for at a load average of 20 on two cores (the slowest measured
# was about a minute, the whole account's build); reached only by a child that hangs.
DEADLINE_SECONDS = 300.0
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "functions")}


def _ctrl_c_as_in_a_terminal() -> None:
    """A shell that starts a job in the background (`make test &`, a CI script, nohup) starts it
    with SIGINT ignored, which every process it starts inherits: Python then never turns Ctrl-C
    into KeyboardInterrupt, and a test that sends one would wait in vain. The child gets SIGINT's
    default back, as a command typed in a terminal has it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Hung(AssertionError):
    """The child printed nothing awaited, or did not end, within the deadline."""


class Child:
    """`python -m gpufill.cli ARGS`, its stdout and stderr read line by line as they come."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.args = args
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gpufill.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=ENV if env is None else env, start_new_session=True, preexec_fn=_ctrl_c_as_in_a_terminal,
        )
        # One thread a pipe keeps it drained, so a chatty stderr (--verbose) never blocks the child
        # while the test waits on stdout, and a wait can have a deadline.
        self._lines: dict[str, queue.Queue[str | None]] = {"stdout": queue.Queue(), "stderr": queue.Queue()}
        self.seen: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._readers = [
            threading.Thread(target=self._drain, args=(getattr(self.process, name), self._lines[name]), daemon=True)
            for name in self._lines
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _drain(pipe, lines: queue.Queue) -> None:
        for line in pipe:
            lines.put(line)
        lines.put(None)  # end of file

    def line(self, stream: str = "stdout", deadline: float = DEADLINE_SECONDS) -> str:
        """The next line the child prints on `stream` ("" once it closed it)."""
        try:
            line = self._lines[stream].get(timeout=deadline)
        except queue.Empty:
            raise Hung(f"{self.args}: nothing on {stream} within {deadline:.0f} s; {self._printed()}") from None
        if line is None:
            self._lines[stream].put(None)  # every later read sees the end too
            return ""
        self.seen[stream].append(line)
        return line

    def cpu_seconds(self) -> float | None:
        """The CPU time (user + sys) the child has used so far, where /proc says it (Linux)."""
        try:
            fields = open(f"/proc/{self.process.pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def send(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)

    def finish(self, deadline: float = DEADLINE_SECONDS) -> tuple[str, str]:
        """Waits for the child to exit; what it printed on stdout and stderr that was not read yet."""
        try:
            self.process.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            raise Hung(f"{self.args}: still running {deadline:.0f} s later; {self._printed()}") from None
        for reader in self._readers:
            reader.join(timeout=deadline)
        return self._rest("stdout"), self._rest("stderr")

    def cpu_seconds_at_exit(self, deadline: float = DEADLINE_SECONDS) -> float | None:
        """Waits for the child to exit, then its whole CPU time, read before it is reaped (Linux)."""
        if not hasattr(os, "waitid"):
            return None
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            # WNOWAIT leaves the exited child unreaped, so its /proc entry still holds its times.
            if os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return self.cpu_seconds()
            time.sleep(0.02)
        raise Hung(f"{self.args}: still running {deadline:.0f} s later; {self._printed()}")

    def _rest(self, stream: str) -> str:
        rest = []
        while (line := self.line(stream, deadline=0.001)) != "":
            rest.append(line)
        return "".join(rest)

    def _printed(self) -> str:
        out, err = "".join(self.seen["stdout"]), "".join(self.seen["stderr"])
        return f"it printed:\n{out[-2000:]}\nand on stderr:\n{err[-2000:]}"

    def kill(self) -> None:
        """Ends the child and everything it started, if still running, and reaps it."""
        # Until the child is reaped its pid cannot name another group; one that exited on its own
        # has waited for what it started (the synth's child).
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        for pipe in (self.process.stdout, self.process.stderr):
            with contextlib.suppress(OSError):
                pipe.close()


@contextlib.contextmanager
def child(*args: str, env: dict[str, str] | None = None) -> Iterator[Child]:
    """A running `gpufill ARGS`, killed with its process group when the block ends, however it ends."""
    started = Child(list(args), env)
    try:
        yield started
    finally:
        started.kill()
