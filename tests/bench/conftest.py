import sys
from pathlib import Path

# `bench` lives at the repo root, next to `tests`; `python -m pytest` from the root finds it,
# a bare `pytest` may not.
ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
