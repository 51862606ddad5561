"""`make mutation`: how many small bugs in the request model and the policy the fast tests catch.

Two passes, one score per module:
1. mutmut mutates function bodies (a comparison flipped, a constant moved, a call dropped) and
   runs the tests that reach each function.
2. tools/mutation/module_level.py applies hand-written mutations to what mutmut never touches:
   module-level rules such as rank thresholds, error-code sets and pydantic Field limits.

mutmut derives a module's import name from its path and only strips a leading `src/`, so the
run happens in a staging copy (build/mutation/) with the package under src/gpufill; the
staging copy is kept between runs so mutmut only re-tests what changed.

`--only PATTERN` (a glob over module names, e.g. 'gpufill.policy.result*'; repeatable) mutates,
tests and reports only the matching modules, so one module can be worked on in minutes; the
other modules' last results are kept for the next full run.

The score per module is compared with tools/mutation/baseline.json: the run fails when a
module's score falls below its baseline. Mutants the baseline lists as equivalent (each by its
function and the change it makes, with the reason it changes nothing a user could see; see
equivalents.py) are left out of the score, and an entry that no longer matches a surviving
mutant fails the run. `--update-baseline` writes the measured scores (the equivalent mutants
and their reasons are kept by hand).
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import os
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from equivalents import KILLED, UNTESTED, Entry, dump, load, match, mutmut_changes  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STAGING = ROOT / "build" / "mutation"
BASELINE = Path(__file__).with_name("baseline.json")
MUTATED = ["src/gpufill/models/request*.py", "src/gpufill/models/capacity_block_rules.py", "src/gpufill/policy/*",
           # Where a run launches, records, settles and classifies: the code that loses money when wrong.
           "src/gpufill/adapters/aws.py", "src/gpufill/adapters/ec2.py", "src/gpufill/adapters/fleet_launch.py",
           "src/gpufill/adapters/launch_calls.py",
           "src/gpufill/adapters/instances_table.py", "src/gpufill/adapters/run_store.py",
           "src/gpufill/handlers/launch_batch.py",
           # The handlers that wait for capacity and for boots, refill, roll back and tear down.
           "src/gpufill/handlers/wait_for_capacity.py", "src/gpufill/handlers/wait_until_running.py",
           "src/gpufill/handlers/start_refill.py", "src/gpufill/handlers/terminate_region_instances.py",
           "src/gpufill/handlers/roll_back_gang.py",
           # The sweep asks for teardowns on its own (it never terminates): a wrong ask costs an approver's time.
           "src/gpufill/handlers/sweep.py",
           # Who may answer an approval (a purchase or a teardown): the approver AWS authenticated.
           "src/gpufill/handlers/answer_approval.py",
           # Capacity Blocks for ML and the spend guard: non-refundable purchases and the schedule
           # that asks for a teardown.
           "src/gpufill/adapters/capacity_blocks.py", "src/gpufill/adapters/schedules.py", "src/gpufill/adapters/late_rounds.py",
           "src/gpufill/handlers/describe_capacity_block_offerings.py", "src/gpufill/handlers/choose_capacity_block.py",
           "src/gpufill/handlers/purchase_capacity_block.py", "src/gpufill/handlers/plan_block_launch.py",
           "src/gpufill/handlers/await_purchase_approval.py",
           # A teardown's decision gives back maintenance and restarts refills; its reminders ask again.
           "src/gpufill/handlers/record_approval_decision.py", "src/gpufill/handlers/remind_approvers.py",
           "src/gpufill/handlers/refill_restarts.py"]
# mutmut leaves decorated functions alone, and a Lambda handler is decorated (Powertools' logger,
# tracer and metrics, then transient_aws_errors): in the staged copy of these modules each decorated
# top-level function is defined bare and wrapped by the same decorators, in the same order, right
# after it, so its body is mutated and the tests still call it through every wrapper.
UNDECORATED = ["handlers/launch_batch.py", "handlers/wait_for_capacity.py", "handlers/wait_until_running.py",
               "handlers/start_refill.py", "handlers/terminate_region_instances.py", "handlers/roll_back_gang.py",
               "handlers/sweep.py", "handlers/answer_approval.py",
               "handlers/describe_capacity_block_offerings.py", "handlers/choose_capacity_block.py",
               "handlers/purchase_capacity_block.py", "handlers/plan_block_launch.py", "handlers/await_purchase_approval.py",
               "handlers/record_approval_decision.py", "handlers/remind_approvers.py"]
# mutmut also leaves alone a method with any decorator but a lone @classmethod or @staticmethod,
# so a pydantic validator (@field_validator then @classmethod) or a @property is never mutated: in
# the staged copy of these modules each such method's body moves to a module-level function that
# the method, still decorated, calls with its own arguments (see unwrap_methods).
UNWRAPPED = ["models/request.py", "models/request_options.py", "models/request_resolved.py"]
# mutmut runs the unit tests that reach each mutated function. The bad-request workflow tests
# assert the same rules through the local engine, which costs ~15 s per mutant (the engine is
# deployed anew in each forked test run); the module-level pass runs them in full.
TESTS = ["tests/unit"]
COPIED = ["tests", "statemachine", "startup", "examples"]


def stage() -> None:
    """Lay out build/mutation/ as mutmut expects it, updating only files that changed."""
    _sync(ROOT / "functions" / "gpufill", STAGING / "src" / "gpufill", UNDECORATED, UNWRAPPED)
    for name in COPIED:
        _sync(ROOT / name, STAGING / name)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pytest_options = project["tool"]["pytest"]["ini_options"]
    lines = [
        "[tool.pytest.ini_options]",
        'pythonpath = ["src", "."]',
        f"filterwarnings = {json.dumps(pytest_options.get('filterwarnings', []))}",
        "[tool.mutmut]",
        'source_paths = ["src/gpufill"]',
        f"only_mutate = {json.dumps(MUTATED)}",
        f"pytest_add_cli_args_test_selection = {json.dumps(TESTS)}",
        'pytest_add_cli_args = ["-q", "-p", "no:cacheprovider"]',
        'also_copy = ["statemachine", "startup", "examples", "conftest.py"]',
        # A mutant that makes the fill loop spin is caught by a timeout; 4x the clean run is plenty.
        "timeout_multiplier = 4.0",
        # The adapters' tests start moto's DynamoDB in each forked test run, seconds of CPU the
        # clean run's durations do not show: without this margin a mutant that changes nothing
        # can be stopped for its time and counted as killed. A mutant that spins still stops at
        # 40 s of CPU or so.
        "timeout_constant = 5.0",
    ]
    _write_if_changed(STAGING / "pyproject.toml", "\n".join(lines) + "\n")
    _write_if_changed(STAGING / "conftest.py", HYPOTHESIS_PROFILE)


# A mutated copy runs each function through mutmut's trampoline, on a machine busy with two test
# runs at once: a hypothesis example can take longer than the 200 ms deadline for reasons no
# mutant causes. A deadline failure in the clean or stats run stops the whole run, and one in a
# mutant's run would count the mutant as killed, so the mutation runs have no deadline (nor the
# health check that fails on slow data generation).
HYPOTHESIS_PROFILE = """from hypothesis import HealthCheck, settings

settings.register_profile("mutation", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mutation")
"""


def _sync(source: Path, target: Path, undecorated: list[str] | None = None, unwrapped: list[str] | None = None) -> None:
    for path in source.rglob("*"):
        if "__pycache__" in path.parts or path.is_dir():
            continue
        data = path.read_bytes()
        if path.relative_to(source).as_posix() in (undecorated or []):
            data = undecorate(data.decode()).encode()
        if path.relative_to(source).as_posix() in (unwrapped or []):
            data = unwrap_methods(data.decode()).encode()
        _write_if_changed(target / path.relative_to(source), data)
    for path in list(target.rglob("*")) if target.exists() else []:
        if path.is_file() and "__pycache__" not in path.parts and not (source / path.relative_to(target)).exists():
            path.unlink()


def undecorate(source: str) -> str:
    """The module with each decorated top-level function defined bare, then wrapped by its
    decorators in an assignment right after it (`@a @b def f` becomes `def f` and `f = a(b(f))`)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.decorator_list:
            wrapped = node.name
            for decorator in reversed(node.decorator_list):
                wrapped = f"{ast.get_source_segment(source, decorator)}({wrapped})"
            first = min(decorator.lineno for decorator in node.decorator_list) - 1
            edits.append((first, node.lineno - 1, node.end_lineno, f"{node.name} = {wrapped}\n"))
    for first, definition, end, assignment in reversed(edits):
        lines[end:end] = ["\n", assignment]
        del lines[first:definition]
    return "".join(lines)


def unwrap_methods(source: str) -> str:
    """The module with the body of each decorated method (but a lone @classmethod or @staticmethod)
    moved to a module-level function `_Class_method` at the end, which the method, decorated as
    before and with the same signature, returns the result of."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits, helpers = [], []
    for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
        for method in cls.body:
            if not isinstance(method, ast.FunctionDef) or not method.decorator_list:
                continue
            if [ast.unparse(d) for d in method.decorator_list] in (["classmethod"], ["staticmethod"]):
                continue
            helper = f"_{cls.name}_{method.name.lstrip('_')}"
            args = method.args
            if args.vararg or args.kwarg:
                raise ValueError(f"{cls.name}.{method.name}: *args and **kwargs are not unwrapped")
            passed = [a.arg for a in args.posonlyargs + args.args] + [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
            first, end = method.body[0].lineno - 1, method.end_lineno
            indent = " " * method.body[0].col_offset
            body = [line[len(indent) - 4:] if line.startswith(indent) else line for line in lines[first:end]]
            returns = f" -> {ast.unparse(method.returns)}" if method.returns else ""
            helpers.append(f"\n\ndef {helper}({ast.unparse(args)}){returns}:\n" + "".join(body))
            edits.append((first, end, f"{indent}return {helper}({', '.join(passed)})\n"))
    for first, end, call in reversed(edits):
        lines[first:end] = [call]
    text = "".join(lines)
    return text if not helpers else text.rstrip("\n") + "\n" + "".join(helpers)


def _write_if_changed(path: Path, content: str | bytes) -> None:
    data = content.encode() if isinstance(content, str) else content
    if path.exists() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def matches(module: str, only: list[str] | None) -> bool:
    return not only or any(fnmatch.fnmatchcase(module, pattern) for pattern in only)


def mutmut_modules() -> list[str]:
    """The modules mutmut mutates, named as mutmut names them (from their staged path)."""
    src = STAGING / "src"
    paths = {path for pattern in MUTATED for path in src.glob(pattern.removeprefix("src/"))}
    return sorted(path.relative_to(src).with_suffix("").as_posix().replace("/", ".")
                  for path in paths if path.suffix == ".py" and path.name != "__init__.py")


def _refresh_data_files() -> None:
    """mutmut copies the package's data files (the instance catalog's JSON) into mutants/ once and
    never again; a catalog that changed since would make the clean test run fail."""
    copied = STAGING / "mutants" / "src"
    if not copied.exists():
        return
    for path in (STAGING / "src").rglob("*"):
        if path.is_file() and path.suffix != ".py" and "__pycache__" not in path.parts:
            _write_if_changed(copied / path.relative_to(STAGING / "src"), path.read_bytes())


def run_mutmut(children: int, only: list[str] | None = None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the mutated copy must win
    mutmut = Path(sys.executable).with_name("mutmut")
    # Named mutants are always re-tested, so a run with --only never reports a stale result.
    names = [f"{module}.*" for module in mutmut_modules() if matches(module, only)] if only else []
    if only and not names:
        return  # only module-level rules match (constants, bootstrap.user_data)
    _refresh_data_files()
    # mutmut's progress lines are noise on success; on failure its last lines say why (a clean
    # test run that failed, a stats run that found no tests), which "exit status 1" alone does not.
    _mutmut(mutmut, children, names, env)
    # mutmut collects which test reaches which function once, and only adds to it for new tests:
    # a function that is new since (added, moved into a mutated module, staged bare or unwrapped)
    # is in no test's list, so its mutants read "no tests" although tests reach it. Collect again
    # from scratch and re-test just those functions.
    unknown = functions_without_stats(only)
    if unknown:
        print(f"{len(unknown)} function(s) new since mutmut's test statistics were collected; collecting them again")
        (STAGING / "mutants" / "mutmut-stats.json").unlink()
        _mutmut(mutmut, children, [f"{function}__mutmut_*" for function in sorted(unknown)], env)


def _mutmut(mutmut: Path, children: int, names: list[str], env: dict[str, str]) -> None:
    done = subprocess.run([str(mutmut), "run", "--max-children", str(children), *names], cwd=STAGING, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    if done.returncode != 0:
        raise SystemExit(failure_message(done.returncode, done.stdout))


def functions_without_stats(only: list[str] | None) -> set[str]:
    """The functions (mutmut's mangled names) whose mutants read "no tests" and that mutmut's
    test statistics do not know at all."""
    stats = STAGING / "mutants" / "mutmut-stats.json"
    if not stats.exists():
        return set()
    known = set(json.loads(stats.read_text()).get("function_hashes", {}))
    return {mutant.partition("__mutmut_")[0] for module, statuses in mutmut_results().items() if matches(module, only)
            for mutant, status in statuses.items() if status == "no tests"} - known


def failure_message(returncode: int, output: str, lines: int = 40) -> str:
    """mutmut's last lines, with its progress spinner's carriage-return updates folded away."""
    shown = [line.rsplit("\r", 1)[-1] for line in output.split("\n")]
    tail = "\n".join(line for line in shown if line.strip())
    tail = "\n".join(tail.splitlines()[-lines:])
    return f"mutmut run failed with exit status {returncode}; its last lines:\n{tail}"


def mutmut_results() -> dict[str, dict[str, str]]:
    """{module: {mutant: status}} from mutmut's .meta files."""
    from mutmut.stats import status_by_exit_code  # mutmut is only installed for this run

    found: dict[str, dict[str, str]] = defaultdict(dict)
    for meta in (STAGING / "mutants" / "src").rglob("*.py.meta"):
        module = meta.relative_to(STAGING / "mutants" / "src").as_posix().removesuffix(".py.meta").replace("/", ".")
        for mutant, exit_code in json.loads(meta.read_text())["exit_code_by_key"].items():
            found[module][mutant] = status_by_exit_code[exit_code]
    return found


MODULE_LEVEL_RESULTS = STAGING / "module-level.json"


def module_level_modules() -> list[str]:
    from module_level import MUTATIONS

    return sorted({mutation.module for mutation in MUTATIONS})


def module_level_results(*, rerun: bool, only: list[str] | None = None) -> dict[str, dict[str, str]]:
    """Run the module-level pass, or read what the last one found (kept in build/mutation/).

    With `only`, just the matching modules' rules are run; the other modules keep their last results.
    """
    kept = json.loads(MODULE_LEVEL_RESULTS.read_text()) if MODULE_LEVEL_RESULTS.exists() else {}
    if not rerun:
        return kept
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    selection = [arg for pattern in only or [] for arg in ("--only", pattern)]
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("module_level.py")), "--json", *selection],
                         cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout
    found = json.loads(out)
    if only:
        found = {**{m: s for m, s in kept.items() if not matches(m, only)}, **found}
    MODULE_LEVEL_RESULTS.write_text(json.dumps(found))
    return found


def report(results: dict[str, dict[str, str]], baseline: dict, excused: dict[str, Entry], stale: list[str]) -> bool:
    floors = baseline.get("scores", {})
    found = scores(results, excused)
    ok = True
    print(f"{'module':<44} {'mutants':>7} {'killed':>7} {'equiv.':>7} {'score':>7} {'baseline':>9}")
    for module in sorted(results):
        counted = {m: s for m, s in results[module].items() if s not in UNTESTED}
        equiv = [m for m, s in counted.items() if s not in KILLED and m in excused]
        killed = sum(1 for s in counted.values() if s in KILLED)
        score = found[module]
        floor = floors.get(module)
        flag = ""
        if floor is not None and score < floor:
            ok, flag = False, "  BELOW BASELINE"
        print(f"{module:<44} {len(counted):>7} {killed:>7} {len(equiv):>7} {score:>6}% "
              f"{'' if floor is None else f'{floor}%':>9}{flag}")
    print()
    survivors = [(module, m, s) for module in sorted(results) for m, s in sorted(results[module].items())
                 if s not in KILLED and s not in UNTESTED]
    listed = [(mod, m, s) for mod, m, s in survivors if m in excused]
    new = [(mod, m, s) for mod, m, s in survivors if m not in excused]
    if listed:
        print(f"{len(listed)} equivalent mutant(s), listed in {BASELINE.relative_to(ROOT)} with their reasons.")
    if new:
        print(f"{len(new)} surviving mutant(s) (`cd build/mutation && mutmut show NAME` shows one):")
        for _module, mutant, status in new:
            print(f"  {status:<10} {mutant}")
    # An entry is matched by its function and its change, so renumbering cannot move it onto
    # another mutant; one that matches nothing, matches a killed mutant or matches more mutants
    # than it counts means the code or the tests changed under it.
    if stale:
        ok = False
        print(f"{len(stale)} equivalent(s) listed in {BASELINE.relative_to(ROOT)} no longer hold; check each and "
              "edit or remove it:")
        for why in stale:
            print(f"  {why}")
    return ok


def scores(results: dict[str, dict[str, str]], excused: dict[str, Entry]) -> dict[str, float]:
    found = {}
    for module, statuses in results.items():
        counted = {m: s for m, s in statuses.items() if s not in UNTESTED}
        scored = [m for m, s in counted.items() if not (s not in KILLED and m in excused)]
        killed = sum(1 for m in scored if counted[m] in KILLED)
        found[module] = round(100 * killed / len(scored), 1) if scored else 100.0
    return found


def write_baseline(baseline: dict) -> None:
    """The baseline with its scores in module order and its equivalents in function order, one
    entry in three lines: the function, the change, the reason (see equivalents.py)."""
    scores_part = json.dumps(dict(sorted(baseline.get("scores", {}).items())), indent=2, ensure_ascii=False)
    entries = []
    for item in dump(load(baseline.get("equivalent", []))):
        fields = [f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}" for key, value in item.items()]
        entries.append("    {" + ",\n     ".join(fields) + "}")
    text = '{\n  "scores": ' + scores_part.replace("\n", "\n  ") + ',\n  "equivalent": [\n' + ",\n".join(entries) + "\n  ]\n}\n"
    assert json.loads(text) == {"scores": json.loads(scores_part), "equivalent": dump(load(baseline.get("equivalent", [])))}
    BASELINE.write_text(text)


def equivalent_mutants(results: dict[str, dict[str, str]], baseline: dict) -> tuple[dict[str, Entry], list[str]]:
    """The mutants the baseline's equivalents excuse, and the entries that no longer hold."""
    return match(load(baseline.get("equivalent", [])), results, lambda mutants: mutmut_changes(STAGING, mutants))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=2, help="mutants tested at once")
    parser.add_argument("--update-baseline", action="store_true", help="write the measured scores as the baseline")
    parser.add_argument("--skip-mutmut", action="store_true", help="report the last mutmut run again")
    parser.add_argument("--skip-module-level", action="store_true",
                        help="report the last module-level pass again instead of running it")
    parser.add_argument("--only", action="append", metavar="PATTERN",
                        help="mutate, test and report only modules matching this glob, e.g. 'gpufill.policy.result*' "
                             "(repeatable; --update-baseline then updates only those modules)")
    parser.add_argument("--stage-only", action="store_true", help="lay out the staging copy and stop (module_level.py)")
    args = parser.parse_args()
    stage()
    if args.stage_only:
        return 0
    if args.only and not any(matches(m, args.only) for m in mutmut_modules() + module_level_modules()):
        parser.error(f"no mutated module matches {' '.join(args.only)}")
    if not args.skip_mutmut:
        run_mutmut(args.children, args.only)
    results = mutmut_results()
    for module, statuses in module_level_results(rerun=not args.skip_module_level, only=args.only).items():
        results.setdefault(module, {}).update(statuses)
    results = {module: statuses for module, statuses in results.items() if matches(module, args.only)}
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    excused, stale = equivalent_mutants(results, baseline)
    if args.update_baseline:
        baseline["scores"] = {**baseline.get("scores", {}), **scores(results, excused)}
        write_baseline(baseline)
        print(f"baseline written to {BASELINE.relative_to(ROOT)}")
    return 0 if report(results, baseline, excused, stale) else 1


if __name__ == "__main__":
    sys.exit(main())
