"""tools/param_walk.py on a small made-up package: stays, returns and climbs counted as documented,
one side of a branch taken on an assumption, a part of the parameter followed no further."""

import textwrap

import pytest

param_walk = pytest.importorskip("tools.param_walk")  # absent from the mutation staging copy

FILES = {
    "handlers/h.py": """
        from gpufill.adapters import a
        from gpufill.policy import p
        from gpufill.policy.q import ask

        def handler(event):
            request = event["request"]
            if request.refill is not None and a.stopped(request.owner_id):
                return a.stop(request)
            a.keep(request.owner_id)
            decided = p.decide(request)
            if request.mode == "fleet":
                ask(request)
            else:
                p.probe(request)
            a.record(decided)
            local(request)

        def local(r):
            a.keep(r)
    """,
    "adapters/a.py": """
        def stopped(owner): ...
        def stop(request): ...
        def keep(owner): ...
        def record(decided): ...
    """,
    "policy/p.py": """
        from gpufill.policy import q

        def decide(request):
            q.ask(request)
            return rule(request.placement)

        def rule(placement): ...
        def probe(request): ...
    """,
    "policy/q.py": """
        def ask(request): ...
    """,
}


@pytest.fixture
def root(tmp_path):
    for name, text in FILES.items():
        path = tmp_path / "functions" / "gpufill" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def test_the_walk_follows_the_parameter_in_call_order_and_counts_returns_and_climbs(root):
    walked = param_walk.walk("gpufill.handlers.h.handler", "request", {"refill": None, "mode": "fleet"}, root)
    assert walked == [
        ("gpufill.handlers.h", ["handler"]),
        ("gpufill.adapters.a", ["keep"]),  # a part of the request: a stay, followed no further
        ("gpufill.policy.p", ["decide"]),
        ("gpufill.policy.q", ["ask"]),
        ("gpufill.policy.p", ["rule"]),
        ("gpufill.policy.q", ["ask"]),  # the fleet side only; the probe is not taken
        ("gpufill.handlers.h", ["local"]),
        ("gpufill.adapters.a", ["keep"]),
    ]
    assert param_walk.figures(walked) == {"stays": 8, "files": 4, "returns": 4, "climbs": 1}


def test_a_branch_the_assumptions_cannot_decide_is_followed_on_both_sides(root):
    walked = param_walk.walk("gpufill.handlers.h.handler", "request", {}, root)
    assert ("gpufill.adapters.a", ["stopped", "stop", "keep"]) == walked[1]
    assert walked[5:7] == [("gpufill.policy.q", ["ask"]), ("gpufill.policy.p", ["probe"])]


def test_the_command_prints_each_stay_and_the_figures(root, capsys):
    assert param_walk.main(["gpufill.handlers.h.handler", "request", "--assume", "refill=None", "--assume", "mode=fleet",
                            "--root", str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "8 stays in 4 files, 4 returns, 1 climbs"
    assert out[6].split() == ["7", "handlers.h", "local", "[return,", "climb]"]
    with pytest.raises(SystemExit, match="no such function"):
        param_walk.walk("gpufill.handlers.h.nothing", "request", {}, root)
    with pytest.raises(SystemExit, match="not a parameter"):
        param_walk.walk("gpufill.handlers.h.handler", "nothing", {}, root)
