"""Where the app finds the files it deploys, whatever directory `cdk` is run from."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CDK_JSON = REPO_ROOT / "cdk.json"
FUNCTIONS_DIR = REPO_ROOT / "functions"
STATEMACHINE_DIR = REPO_ROOT / "statemachine"
PROVISIONER_ASL = STATEMACHINE_DIR / "provisioner.asl.json"
STARTUP_DIR = REPO_ROOT / "startup"
EXAMPLE_REQUEST = "examples/requests/provision-spot.json"
