"""Mutations of module-level rules, which mutmut leaves alone (it only mutates function bodies).

Rank thresholds, error-code sets, the limits in pydantic Field(...) declarations and the
constants they read are rules a user relies on as much as any function. Each entry below is
one small change to one of them; it is applied to the staging copy (build/mutation/src), the
targeted tests run, and when they all pass the fast tests run in full before the mutant is
called a survivor. An entry whose text is no longer in the file fails the run: the list must
follow the code.

Run by tools/mutation/run.py; `--json` prints {module: {mutant: status}}; `--only PATTERN`
(repeatable) runs only the rules of modules whose name matches the glob.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGING = ROOT / "build" / "mutation"
RESULTS = STAGING / "module-level.json"  # what tools/mutation/run.py keeps of the last pass
FAST_TESTS = ["tests/unit", "tests/workflow/test_bad_requests.py"]
# The bad-request workflow tests only exercise the request rules; the policy is confirmed by the
# unit tests alone, which saves ~20 s per surviving policy mutant.
UNIT_TESTS = ["tests/unit"]
REQUEST_TESTS = ["tests/unit/test_request_validation.py", "tests/unit/test_request_and_tokens.py",
                 "tests/unit/test_teardown_policy.py"]


@dataclass(frozen=True)
class Mutation:
    path: str  # under gpufill/
    old: str
    new: str
    tests: tuple[str, ...]
    confirm: tuple[str, ...] = tuple(FAST_TESTS)

    @property
    def module(self) -> str:
        return "gpufill." + self.path.removesuffix(".py").replace("/", ".")

    @property
    def name(self) -> str:
        return f"{self.module}:: {' '.join(self.old.split())} -> {' '.join(self.new.split())}"


def _group(path: str, tests: list[str], changes: list[tuple[str, str]], confirm: list[str] = FAST_TESTS) -> list[Mutation]:
    return [Mutation(path, old, new, tuple(tests), tuple(confirm)) for old, new in changes]


MUTATIONS: list[Mutation] = [
    *_group("models/request.py", REQUEST_TESTS, [
        ("min_length=1, max_length=10)", "min_length=1, max_length=11)"),
        ("min_length=1, max_length=10)", "min_length=0, max_length=10)"),
        ("count: StrictInt = Field(default=1, ge=1)", "count: StrictInt = Field(default=1, ge=0)"),
        ("count: StrictInt = Field(default=1, ge=1)", "count: StrictInt = Field(default=2, ge=1)"),
        ("batch_max: StrictInt | None = Field(default=None, ge=1)", "batch_max: StrictInt | None = Field(default=None, ge=0)"),
        ("min_length=1, max_length=40)", "min_length=1, max_length=41)"),
        ("min_length=1, max_length=40)", "min_length=0, max_length=40)"),
        ("default=DEFAULT_ROOT_VOLUME_GIB, ge=1, le=MAX_ROOT_VOLUME_GIB)", "default=DEFAULT_ROOT_VOLUME_GIB, ge=2, le=MAX_ROOT_VOLUME_GIB)"),
        ("default=DEFAULT_ROOT_VOLUME_GIB, ge=1, le=MAX_ROOT_VOLUME_GIB)", "default=DEFAULT_ROOT_VOLUME_GIB, ge=1, le=MAX_ROOT_VOLUME_GIB + 1)"),
        ("default=None, ge=MIN_APPROVAL_TIMEOUT_SECONDS, le=MAX_APPROVAL_TIMEOUT_SECONDS", "default=None, ge=MIN_APPROVAL_TIMEOUT_SECONDS - 1, le=MAX_APPROVAL_TIMEOUT_SECONDS"),
        ("default=None, ge=MIN_APPROVAL_TIMEOUT_SECONDS, le=MAX_APPROVAL_TIMEOUT_SECONDS", "default=None, ge=MIN_APPROVAL_TIMEOUT_SECONDS, le=MAX_APPROVAL_TIMEOUT_SECONDS + 1"),
        ("Field(default=None, min_length=1, max_length=200)", "Field(default=None, min_length=0, max_length=200)"),
        ("Field(default=None, min_length=1, max_length=200)", "Field(default=None, min_length=1, max_length=201)"),
        ('model_config = ConfigDict(extra="forbid", frozen=True)\n\n    action: Action = "provision"',
         'model_config = ConfigDict(extra="ignore", frozen=True)\n\n    action: Action = "provision"'),
        ('    action: Action = "provision"\n    instance_types', '    action: Action = "plan"\n    instance_types'),
        ('launch_mode: LaunchMode = "fleet"', 'launch_mode: LaunchMode = "partial"'),
        ('    market: Market = "spot"\n', '    market: Market = "on-demand"\n'),
        ('on_demand_strategy: OnDemandStrategy = "cost"', 'on_demand_strategy: OnDemandStrategy = "latency"'),
        ('formula alone.\n    scoring: Scoring = "price-capacity"', 'formula alone.\n    scoring: Scoring = "classic"'),
        ('"int_type": "a whole number",', ""),
        ('"string_type": "a string",', ""),
        ('"list_type": "a list",', ""),
        ('"dict_type": "a JSON object",', ""),
        ('"model_type": "a JSON object",', ""),
    ]),
    *_group("models/request_values.py", REQUEST_TESTS, [
        ("MAX_TEARDOWN_IDS = 1000", "MAX_TEARDOWN_IDS = 1001"),
        ('RESERVED_TAG_PREFIXES = ("gpufill:", "aws:")', 'RESERVED_TAG_PREFIXES = ("gpufill:",)'),
        ('RESERVED_TAG_PREFIXES = ("gpufill:", "aws:")', 'RESERVED_TAG_PREFIXES = ("aws:",)'),
        (r'TAG_TEXT_PATTERN = re.compile(r"^[\w +\-=.:/@]*$")', r'TAG_TEXT_PATTERN = re.compile(r"^[\w +\-=.:/]*$")'),
        (r'TAG_TEXT_PATTERN = re.compile(r"^[\w +\-=.:/@]*$")', r'TAG_TEXT_PATTERN = re.compile(r"^[\w +\-=.:/@;]*$")'),
        (r'TAG_TEXT_PATTERN = re.compile(r"^[\w +\-=.:/@]*$")', r'TAG_TEXT_PATTERN = re.compile(r"^[\w\s+\-=.:/@]*$")'),
        ("MAX_USER_TAGS = EC2_MAX_TAGS - GPUFILL_TAG_COUNT", "MAX_USER_TAGS = EC2_MAX_TAGS - GPUFILL_TAG_COUNT + 1"),
        (r'INSTANCE_TYPE_PATTERN = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")', r'INSTANCE_TYPE_PATTERN = re.compile(r"^[a-zA-Z ][a-zA-Z0-9 -]*\.[a-zA-Z0-9 ]+$")'),
        (r'{}\[\]?*\"#%\\^|~`$&,;:/]{1,80}$', r'{}\[\]?*\"#%\\^|~`$&,;:/]{1,81}$'),
        (r'{}\[\]?*\"#%\\^|~`$&,;:/]{1,80}$', r'{}\[\]?*\"#%\\^|~`&,;:/]{1,80}$'),
        ("[0-9a-f]{8}|[0-9a-f]{17}", "[0-9a-f]{8}|[0-9a-f]{16}"),
        ('Market = Literal["spot", "on-demand", "spot-then-on-demand", "capacity-block"]', 'Market = Literal["spot", "on-demand", "capacity-block"]'),
        ('_TAG_CHARACTERS = "may only hold letters, digits, spaces and + - = . _ : / @"', '_TAG_CHARACTERS = "may only hold letters"'),
    ]),
    *_group("constants.py", REQUEST_TESTS, [
        ("MAX_COUNT = 250", "MAX_COUNT = 251"),
        ("MAX_COUNT = 250", "MAX_COUNT = 249"),
        ("EC2_MAX_TAGS = 50", "EC2_MAX_TAGS = 51"),
        ("EC2_MAX_TAG_KEY_LENGTH = 128", "EC2_MAX_TAG_KEY_LENGTH = 129"),
        ("EC2_MAX_TAG_KEY_LENGTH = 128", "EC2_MAX_TAG_KEY_LENGTH = 127"),
        ("EC2_MAX_TAG_VALUE_LENGTH = 256", "EC2_MAX_TAG_VALUE_LENGTH = 257"),
        ("EC2_MAX_TAG_VALUE_LENGTH = 256", "EC2_MAX_TAG_VALUE_LENGTH = 255"),
        ("GPUFILL_TAGS = (TAG_REQUEST_ID, TAG_MANAGED, TAG_POOL, TAG_DEPLOYMENT)", "GPUFILL_TAGS = (TAG_REQUEST_ID, TAG_MANAGED, TAG_POOL)"),
        ("DEFAULT_ROOT_VOLUME_GIB = 200", "DEFAULT_ROOT_VOLUME_GIB = 40"),
        ("MAX_ROOT_VOLUME_GIB = 16384", "MAX_ROOT_VOLUME_GIB = 16385"),
        ('SUPPORTED_ARCHITECTURE = "x86_64"', 'SUPPORTED_ARCHITECTURE = "arm64"'),
        ("DEFAULT_BATCH_MAX = 4", "DEFAULT_BATCH_MAX = 5"),
        ('DEFAULT_INSTANCE_TYPE = "g6.xlarge"', 'DEFAULT_INSTANCE_TYPE = "g5.xlarge"'),
    ]),
    *_group("bootstrap/user_data.py", REQUEST_TESTS + ["tests/startup/test_startup_user_data.py"], [
        (r'_HF_PART = r"(?!.*(?:--|\.\.))', r'_HF_PART = r"(?!.*(?:\.\.))'),
        (r'_HF_PART = r"(?!.*(?:--|\.\.))', r'_HF_PART = r"(?!.*(?:--))'),
        ("[A-Za-z0-9._-]{0,94}", "[A-Za-z0-9._-]{0,95}"),
        ("[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?", "[A-Za-z0-9_.-](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?"),
        ("[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?", "[A-Za-z0-9._-]{0,94}[A-Za-z0-9_.-])?"),
        ('MODEL_ID_PATTERN = re.compile(rf"(?!.*/.*/)', 'MODEL_ID_PATTERN = re.compile(rf"'),
        ('_PATH_COMPONENT = r"[a-z0-9]+', '_PATH_COMPONENT = r"[a-zA-Z0-9]+'),
        ("[A-Za-z0-9_.-]{{0,127}}", "[A-Za-z0-9_.-]{{0,128}}"),
        ("[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}", "[A-Za-z0-9_.-][A-Za-z0-9_.-]{{0,127}}"),
        ("@sha256:[0-9a-f]{{64}}", "@sha256:[0-9a-f]{{1,64}}"),
        ("MAX_IMAGE_NAME_LENGTH = 255", "MAX_IMAGE_NAME_LENGTH = 256"),
    ]),
    *_group("policy/scoring.py", ["tests/unit/test_scoring.py", "tests/unit/test_scoring_rules.py", "tests/unit/test_ranking.py"], [
        ("AZ_POINTS = {5: 40,", "AZ_POINTS = {5: 41,"),
        ("4: 32,", "4: 33,"),
        ("3: 24,", "3: 25,"),
        ("2: 16}", "2: 17}"),
        ("INTERRUPTION_POINTS = {0: 20,", "INTERRUPTION_POINTS = {0: 21,"),
        ("1: 15,", "1: 16,"),
        ("2: 10,", "2: 11,"),
        ("3: 5}", "3: 6}"),
        ('RANKS = ((75, "S")', 'RANKS = ((76, "S")'),
        ('(65, "A")', '(66, "A")'),
        ('(50, "B"))', '(51, "B"))'),
        ('RANKS = ((75, "S")', 'RANKS = ((74, "S")'),
        ('(65, "A")', '(64, "A")'),
        ('(50, "B"))', '(49, "B"))'),
    ], UNIT_TESTS),
    *_group("policy/teardown.py", ["tests/unit/test_teardown_policy.py", "tests/unit/test_teardown_rules.py"], [
        ('MANAGED_VALUE = "true"', 'MANAGED_VALUE = "True"'),
        ('ENDED_STATES = frozenset({"shutting-down", "terminated"})', 'ENDED_STATES = frozenset({"terminated"})'),
        ('ENDED_STATES = frozenset({"shutting-down", "terminated"})', 'ENDED_STATES = frozenset({"shutting-down"})'),
    ], UNIT_TESTS),
    *_group("policy/status.py", ["tests/unit/test_status_policy.py", "tests/unit/test_teardown_policy.py"], [
        ('BILLED_STATES = frozenset({"running"})', 'BILLED_STATES = frozenset({"running", "pending"})'),
        ('HOURS_STATES = frozenset({"pending", "running", "stopping", "shutting-down"})', 'HOURS_STATES = frozenset({"running", "stopping", "shutting-down"})'),
        ('HOURS_STATES = frozenset({"pending", "running", "stopping", "shutting-down"})', 'HOURS_STATES = frozenset({"pending", "running", "shutting-down"})'),
        ('HOURS_STATES = frozenset({"pending", "running", "stopping", "shutting-down"})', 'HOURS_STATES = frozenset({"pending", "running", "stopping"})'),
        ('HOURS_STATES = frozenset({"pending", "running", "stopping", "shutting-down"})', 'HOURS_STATES = frozenset({"pending", "running", "stopping", "shutting-down", "stopped"})'),
    ], UNIT_TESTS),
    *_group("policy/approval.py", ["tests/unit/test_approval_policy.py", "tests/unit/test_teardown_policy.py"], [
        ("MAX_TEXT = 500", "MAX_TEXT = 501"),
        ("LISTED_INSTANCES = 50", "LISTED_INSTANCES = 51"),
    ], UNIT_TESTS),
    # Each code of a set dropped: the fill loop would read that answer as another outcome.
    *_group("policy/errors.py", ["tests/unit/test_boot_and_causes.py", "tests/unit/test_error_code_classes.py"], [
        ('        "InsufficientInstanceCapacity",\n', ""),
        ('        "InsufficientCapacity",\n', ""),
        ('        "ReservationCapacityExceeded",\n', ""),
        ('        "Unsupported",\n', ""),
        ('"MaxSpotInstanceCountExceeded", ', ""),
        ('"VcpuLimitExceeded", ', ""),
        (', "InstanceLimitExceeded"', ""),
        ('THROTTLE_CODES = frozenset({"RequestLimitExceeded", ', "THROTTLE_CODES = frozenset({"),
        ('        "InvalidLaunchTemplateId.NotFound",\n', ""),
        ('        "VersionLimitExceeded",\n', ""),
        ('"AuthFailure.")', ")"),
        (', "OptInRequired"})', "})"),
    ], UNIT_TESTS),
    *_group("policy/boot.py", UNIT_TESTS, [
        ('LOST_STATES = frozenset({"terminated", "shutting-down"})', 'LOST_STATES = frozenset({"terminated"})'),
        ('LOST_STATES = frozenset({"terminated", "shutting-down"})', 'LOST_STATES = frozenset({"shutting-down"})'),
        ("MAX_BOOT_ROUNDS = 20", "MAX_BOOT_ROUNDS = 21"),
        ("MODEL_SERVER_PORT = 8000", "MODEL_SERVER_PORT = 8001"),
    ], UNIT_TESTS),
    *_group("policy/exhaustion.py", UNIT_TESTS, [("CAUSE_BUDGET = 30_000", "CAUSE_BUDGET = 300")], UNIT_TESTS),
    *_group("policy/tokens.py", UNIT_TESTS, [("MAX_TOKEN_LENGTH = 64", "MAX_TOKEN_LENGTH = 65")], UNIT_TESTS),
    *_group("policy/ranking.py", UNIT_TESTS, [('UNKNOWN = float("inf")', "UNKNOWN = 0.0")], UNIT_TESTS),
]


def _pytest(tests: list[str]) -> int:
    present = [t for t in tests if (STAGING / t).exists()] or FAST_TESTS
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *present],
                          cwd=STAGING, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode


def run(mutation: Mutation) -> str:
    path = STAGING / "src" / "gpufill" / mutation.path
    original = path.read_text()
    if original.count(mutation.old) != 1:
        raise SystemExit(f"module-level mutation no longer matches exactly once in {mutation.path}: {mutation.old!r}")
    try:
        path.write_text(original.replace(mutation.old, mutation.new))
        if _pytest(list(mutation.tests)) != 0:
            return "killed"
        return "killed" if _pytest(list(mutation.confirm)) != 0 else "survived"
    finally:
        path.write_text(original)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print {module: {mutant: status}} at the end")
    parser.add_argument("--rerun-survivors", action="store_true",
                        help="keep the last pass's kills, test only what survived it (after new tests)")
    parser.add_argument("--only", action="append", metavar="PATTERN", help="only modules matching this glob")
    args = parser.parse_args()
    as_json = args.json
    if not (STAGING / "src" / "gpufill").exists():
        # run.py lays out the staging copy; asked as a command, so neither file imports the other.
        subprocess.run([sys.executable, str(Path(__file__).with_name("run.py")), "--stage-only"], check=True)
    found: dict[str, dict[str, str]] = {}
    # --rerun-survivors: keep the last pass's kills, test only what survived it (after new tests).
    last = json.loads(RESULTS.read_text()) if args.rerun_survivors and RESULTS.exists() else {}
    for mutation in MUTATIONS:
        if args.only and not any(fnmatch.fnmatchcase(mutation.module, pattern) for pattern in args.only):
            continue
        previous = last.get(mutation.module, {}).get(mutation.name)
        status = previous if previous == "killed" else run(mutation)
        found.setdefault(mutation.module, {})[mutation.name] = status
        if not as_json:
            print(f"{status:<9} {mutation.name}", flush=True)
    if as_json:
        print(json.dumps(found))
    if last:
        RESULTS.write_text(json.dumps({**{m: s for m, s in last.items() if m not in found}, **found}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
