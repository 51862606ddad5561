"""The errors a run may end on: every Fail state's Error in the workflow's ASL file."""

from __future__ import annotations

import json
from pathlib import Path

ASL = Path(__file__).resolve().parents[2] / "statemachine" / "provisioner.asl.json"


def fail_errors(asl: Path = ASL) -> frozenset[str]:
    found: set[str] = set()

    def walk(states: dict) -> None:
        for state in states.values():
            if state.get("Type") == "Fail" and state.get("Error"):
                found.add(state["Error"])
            for branch in state.get("Branches", []):
                walk(branch["States"])
            for key in ("ItemProcessor", "Iterator"):
                if key in state:
                    walk(state[key]["States"])

    walk(json.loads(asl.read_text())["States"])
    return frozenset(found)
