"""An EC2 client answered in-process: each call noted with its parameters, each answer scripted.

Scripted answers are a dict, an exception (raised), or a callable taking the call's parameters.
A list of them answers successive calls, the last one repeating.
"""

from __future__ import annotations

from botocore.exceptions import ClientError


def client_error(code: str, status: int = 400, message: str | None = None, operation: str = "RunInstances") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message if message is not None else f"{code} said"},
         "ResponseMetadata": {"HTTPStatusCode": status}},
        operation,
    )


class FakeEC2:
    def __init__(self, **answers):
        self.answers = {name: list(value) if isinstance(value, list) else [value] for name, value in answers.items()}
        self.calls: list[tuple[str, dict]] = []

    def called(self, name: str) -> list[dict]:
        return [params for called, params in self.calls if called == name]

    def _answer(self, name: str, params: dict):
        self.calls.append((name, params))
        queue = self.answers.get(name)
        if not queue:
            raise AssertionError(f"unexpected call {name}({params})")
        reply = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(reply, BaseException):
            raise reply
        return reply(params) if callable(reply) else reply

    def __getattr__(self, name: str):
        if name.startswith("_") or name in ("answers", "calls"):
            raise AttributeError(name)
        return lambda **params: self._answer(name, params)

    def get_paginator(self, name: str):
        fake = self

        class Paginator:
            def paginate(self, **params):
                reply = fake._answer(name, params)
                return reply if isinstance(reply, list) else [reply]

        return Paginator()
