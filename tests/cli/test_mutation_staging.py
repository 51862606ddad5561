"""A promise of docs/testing.md, checked: mutmut leaves decorated functions alone, so the mutation
runner (tools/mutation/run.py) stages each handler bare and wrapped by the same decorators, in the
same order, right after it; the handler the tests call is the one Lambda calls."""

import ast
import sys

from tests.support import ROOT

sys.path.insert(0, str(ROOT / "tools" / "mutation"))
from run import UNDECORATED, failure_message, undecorate  # noqa: E402


def test_decorators_become_the_same_wrapping_in_the_same_order():
    source = "import x\n\n\n@a.b(c=1)\n@d\ndef f(e):\n    return e\n\n\ndef g():\n    return 2\n"
    assert undecorate(source) == "import x\n\n\ndef f(e):\n    return e\n\nf = a.b(c=1)(d(f))\n\n\ndef g():\n    return 2\n"
    namespace = {"a": type("A", (), {"b": staticmethod(lambda c: lambda fn: lambda e: ("a", c, fn(e)))}),
                 "d": lambda fn: lambda e: ("d", fn(e))}
    exec(compile(undecorate(source.replace("import x\n", "")), "staged", "exec"), namespace)
    assert namespace["f"](5) == ("a", 1, ("d", 5))


def test_every_staged_handler_is_bare_and_wrapped_by_its_own_decorators_in_order():
    for name in UNDECORATED:
        source = (ROOT / "functions" / "gpufill" / name).read_text()
        [handler] = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "handler"]
        # Powertools' logger first, its tracer and metrics inside, as on every handler.
        decorators = [ast.unparse(d) for d in handler.decorator_list]
        assert decorators[0].startswith("logger.inject_lambda_context"), name
        assert decorators[1:3] == ["tracer.capture_lambda_handler", "metrics.log_metrics"], name
        staged = ast.parse(undecorate(source))
        assert not [n.name for n in staged.body if isinstance(n, ast.FunctionDef) and n.decorator_list], name
        [wrap] = [n for n in staged.body if isinstance(n, ast.Assign) and n.targets[0].id == "handler"]
        expected = "handler"
        for decorator in reversed(decorators):
            expected = f"{decorator}({expected})"
        assert ast.unparse(wrap.value) == expected, name


def test_a_failed_mutmut_run_shows_its_last_lines_not_its_spinner():
    output = "".join(f"line {n}\n" for n in range(50)) + "⠋ running\r⠙ running\rFAILED tests/unit/test_x.py\n\n"
    message = failure_message(1, output, lines=3)
    assert message.splitlines() == ["mutmut run failed with exit status 1; its last lines:", "line 48", "line 49",
                                    "FAILED tests/unit/test_x.py"]
