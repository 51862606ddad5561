"""Teardown approvals on the local engine: the approval step waits for a task token as on AWS;
these answer it the way a person would (through gpufill.approve, the code behind
`gpufill approve|reject`), or let the wait expire at once, as it would when
approval_timeout_seconds pass with no answer."""

from __future__ import annotations

import time


class Approvals:
    """The engine's part that reads and answers teardown approvals (a part of LocalEngine)."""

    def approval(self, name: str) -> dict | None:
        """The approval item of execution `name` (pending or decided), or None."""
        from gpufill.adapters import approvals

        return approvals.get(name)

    def answer_approval(
        self, name: str, decision: str, *, approver: str = "local-user", reason: str | None = None
    ) -> dict:
        """Answer as `gpufill approve|reject` does; raises gpufill.approve.ApprovalError when it may not."""
        from gpufill import approve

        return approve.answer(
            name, decision, approver=approver, reason=reason, sfn=self.client("stepfunctions"), table=None
        )

    def expire_approval(self, name: str) -> None:
        """End the approval wait of execution `name` as its timeout would (States.Timeout)."""
        from moto.stepfunctions.parser.api import ExecutionStatus
        from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackOutcomeTimedOut
        from moto.stepfunctions.parser.models import stepfunctions_parser_backends

        from gpufill.approve import NoPendingApproval

        item = self.approval(name)
        if not item or item.get("decided_at"):
            raise NoPendingApproval(f"execution {name!r} has no pending approval to expire")
        token = item["task_token"]
        _, _, _, region, account, *_ = self.state_machine_arn.split(":")
        for running in stepfunctions_parser_backends[account][region]._get_executions(ExecutionStatus.RUNNING):
            if running.exec_worker.env.callback_pool_manager.notify(token, CallbackOutcomeTimedOut(callback_id=token)):
                self._answered_tokens.add(token)  # a late answer now meets TaskTimedOut, as on AWS
                return
        raise NoPendingApproval(f"execution {name!r} is not waiting for its approval any more")

    def wait_for_approval(self, name: str, timeout: float = 30.0) -> dict:
        """Block until execution `name` (running in another thread) has its approval pending."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            item = self.approval(name)
            if item and "task_token" in item:
                return item
            time.sleep(0.01)
        raise TimeoutError(f"execution {name!r} asked for no approval within {timeout}s")

    def approval_messages(self, env: str | None = None) -> list[dict]:
        """Everything published to deployment `env`'s approval topic so far: {"subject", "message"}."""
        from moto.sns.models import sns_backends

        topic_arn = self.deployments[env or self.env_names[0]].approval_topic_arn
        _, _, _, region, account, *_ = topic_arn.split(":")
        topic = sns_backends[account][region].topics[topic_arn]
        return [{"subject": subject, "message": message} for _, message, subject, *_ in topic.sent_notifications]

    def _release_task_token_waits(self) -> None:
        """A stopped execution's waitForTaskToken thread would wait out its whole timeout
        (a day by default); wake every one so the engine closes at once."""
        from moto.stepfunctions.parser.models import stepfunctions_parser_backends

        if not self.deployments:  # a start that failed before anything could run
            return
        _, _, _, region, account, *_ = self.state_machine_arn.split(":")
        for execution in stepfunctions_parser_backends[account][region]._get_executions():
            worker = execution.exec_worker
            if worker is not None:
                for endpoint in list(worker.env.callback_pool_manager._pool.values()):
                    endpoint.interrupt_all()

    def _answer_when_pending(self, name: str, decision: str) -> bool:
        item = self.approval(name)
        if not item or "task_token" not in item or item.get("decided_at"):
            return False
        if decision == "timeout":
            self.expire_approval(name)
        else:
            self.answer_approval(name, decision, approver=_local_user(), reason=f"answered by gpufill simulate --decision {decision}")
        return True


def _local_user() -> str:
    import getpass

    try:
        return f"{getpass.getuser()} (local)"
    except Exception:  # noqa: BLE001 (no login name in some containers)
        return "local-user"

