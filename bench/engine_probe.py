"""Times the local engine of whichever gpufill tree is first on PYTHONPATH (run as a script by
bench/engine_speed.py, so it works on any commit that has `gpufill.local.engine.LocalEngine`).

Prints one JSON line: seconds to import the engine, to start it the first time in the process
(cold: the lazy imports and model loads included) and a second time (warm: what every further
test pays), to run the request on each, and the state transitions of a run.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
import warnings
from pathlib import Path


def main(request_path: str, market_path: str) -> None:
    started = time.perf_counter()
    from gpufill.local.engine import LocalEngine
    from gpufill.local.scenario import MarketScenario

    imported = time.perf_counter()
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    request = json.loads(Path(request_path).read_text())
    scenario = MarketScenario.model_validate(json.loads(Path(market_path).read_text()))
    found: dict = {"import_s": imported - started}
    for label in ("cold", "warm"):
        with contextlib.redirect_stdout(io.StringIO()):
            begin = time.perf_counter()
            with LocalEngine(scenario) as engine:
                entered = time.perf_counter()
                execution = engine.run(request, name="bench-engine-speed")
                ran = time.perf_counter()
        found[f"{label}_start_s"] = entered - begin
        found[f"{label}_run_s"] = ran - entered
        found["transitions"] = execution.metrics["state_transitions"]
        found["status"] = execution.status
    print(json.dumps(found))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
