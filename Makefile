# gpufill: every target sets up what it needs, so each works on a fresh clone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PY_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20

.PHONY: iam-report
# Per role, the grants gpufill's runs use and those none uses; records what doctor asks AWS.
iam-report: $(PY_STAMP) $(NODE_STAMP)
	$(VENV)/bin/gpufill local iam-report --write

.PHONY: demo test test-all bench bench-dynamic bench-quick bench-engine bench-load bench-agreement setup lint-asl clean mutation

demo: $(PY_STAMP) $(NODE_STAMP)
	$(VENV)/bin/gpufill simulate examples/requests/provision-spot.json --market examples/markets/first-az-sold-out.json

# The whole suite but the sweeps at the maxima, which take minutes (test-all runs them too).
# Spread over the machine's cores (-n auto), each test module on one worker (--dist loadscope),
# so a module's simulated account is built once; the longest modules are handed out first
# (tests/module_costs.json, see docs/testing.md) so that no worker is left running one alone.
PYTEST_PARALLEL ?= -n auto --dist loadscope
# pytest keeps each test module's rewritten bytecode in __pycache__, so a worker that starts
# reads it instead of rewriting every assert again (6 s of each worker's start, measured); an
# environment that forbids bytecode files would take that away.
unexport PYTHONDONTWRITEBYTECODE

test: setup lint-asl lint
	$(PY) -m pytest -m "not slow" $(PYTEST_PARALLEL)

test-all: setup lint-asl lint
	$(PY) -m pytest $(PYTEST_PARALLEL)

# One kind of test, one folder of tests/ (docs/testing.md says what each holds and costs), without
# the sweeps marked slow and without the linters: `make test-faults PYTEST_ARGS="-k fleet -x"`.
TEST_KINDS := unit workflow engine faults limits iam cli startup infra bench
.PHONY: $(addprefix test-,$(TEST_KINDS))
$(addprefix test-,$(TEST_KINDS)): test-%: setup
	$(PY) -m pytest tests/$* -m "not slow" $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# Five seeds of 20 static markets plus examples/ on the state machine (gpufill's twice: cold, then
# warm facts), then five seeds of 20 dynamic markets over 12 modelled hours against a SkyPilot-style
# baseline. Measured: 769 s of CPU for the static part (220 state-machine runs on 2 workers, IAM
# judging off, one pool for every seed) and 28 s for the dynamic one (one process): about 7 minutes on
# 2 quiet cores, within 10; 34 minutes when other work held the load average at 15-26.
# Pooled figures with their spread, docs/benchmark.md's dynamic section regenerated.
bench: $(PY_STAMP) $(NODE_STAMP)
	$(PY) -m bench
	$(PY) -m bench.dynamic

# The dynamic markets alone (28 s of CPU in one process, so about half a minute on a quiet machine; 6 minutes at load average 14 on 2
# cores): bench/results/dynamic/ and docs/benchmark.md's section.
bench-dynamic: $(PY_STAMP)
	$(PY) -m bench.dynamic

# For development: two seeds, one static market per request size, no examples, then one seed's four
# scarce dynamic markets (33 s + 1 s on a quiet machine; 5 min at load average 13); writes to a scratch directory.
bench-quick: $(PY_STAMP) $(NODE_STAMP)
	$(PY) -m bench --quick --out $${TMPDIR:-/tmp}/gpufill-bench-quick
	$(PY) -m bench.dynamic --quick --out $${TMPDIR:-/tmp}/gpufill-bench-quick/dynamic

# The local engine's speed on `make demo`'s run, against a worktree of BASE (default: the merge-base with main).
# 25 requests at once in one deployment on one scarce market, with EC2's throttling at AWS's bucket
# sizes (SCALE=0.2 shrinks them): endings, duplicates, orphans, throttles, DynamoDB conflicts, against
# one request alone. Writes bench/results/load.md (docs/benchmark.md, "Many requests at once").
# A run is stopped after TIMEOUT wall seconds (default: 600 times the load average per core, when above 1).
bench-load: $(PY_STAMP) $(NODE_STAMP)
	$(PY) -m bench.load $(if $(RUNS),--runs $(RUNS)) $(if $(SCALE),--scale $(SCALE)) $(if $(TIMEOUT),--timeout $(TIMEOUT))

bench-engine: $(PY_STAMP) $(NODE_STAMP)
	$(PY) -m bench.engine_speed $(if $(BASE),--engine-base $(BASE)) $(if $(REPEAT),--repeat $(REPEAT))

# The dynamic replay against the real state machine on the local engine, market by market: the 15
# markets of docs/benchmark.md's "The replay against the state machine" (about 15 minutes of wall
# time on 2 busy cores; MARKETS="3 20261205:12" picks others). Writes bench/results/dynamic/agreement.json.
AGREEMENT_MARKETS := 0 1 2 4 5 6 7 9 10 11 20261205:7 20261205:10 3 20261205:12 8
bench-agreement: $(PY_STAMP) $(NODE_STAMP)
	$(PY) -m bench.dynamic.engine_check --markets $(or $(MARKETS),$(AGREEMENT_MARKETS)) --out bench/results/dynamic/agreement.json

# How many tests each folder of tests/ holds, by pytest's own collection (`--collect-only`, about
# half a minute; 2 min at load average 8): prints the table and rewrites docs/testing.md's block.
.PHONY: test-counts
test-counts: $(PY_STAMP)
	$(PY) tools/count_tests.py --write

# Mutation testing of the request model (models/request*.py) and policy/ against the fast tests (not part of `make test`):
# the score per module and the survivors; fails when a score falls below tools/mutation/baseline.json.
mutation: $(PY_STAMP)
	$(PY) -m pip install --quiet -e '.[mutation]'
	$(PY) tools/mutation/run.py

setup: $(PY_STAMP) $(NODE_STAMP) shellcheck

$(PY_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "gpufill needs Python 3.11 or newer (found " + sys.version.split()[0] + ")")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

$(NODE_STAMP): package.json
	@node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : (console.error("gpufill needs Node 20 or newer"), 1))'
	npm install --no-audit --no-fund --silent
	@touch $@

# The startup scripts are checked with shellcheck (a Debian package).
.PHONY: shellcheck
shellcheck:
	@command -v shellcheck >/dev/null || { apt-get update -qq && apt-get install -y -qq shellcheck >/dev/null; } || \
		{ echo "shellcheck is missing: install it (apt-get install shellcheck)"; exit 1; }

.PHONY: lint
lint: $(PY_STAMP)
	$(VENV)/bin/ruff check functions cdk bench tools tests

lint-asl: $(NODE_STAMP)
	npx --no-install asl-validator $(foreach f,$(wildcard statemachine/*.asl.json),--json-path $(f))

clean:
	rm -rf $(VENV) node_modules cdk.out
