"""The CDK app (`cdk/`) synthesized for one local deployment, kept on disk by a digest of its inputs.

A synth costs 7-13 s (jsii starts Node, cdk-nag checks every resource); the local engine starts
in about a second. So the cloud assembly's templates are kept in `.cache/gpufill-stack/` at the
repository root (git-ignored), one file per deployment name and input digest, and synthesized
again only when an input changes: a file the app reads (INPUTS), the installed CDK libraries,
the Python version, or the synth context. Several processes (pytest-xdist workers) may ask at
once: one synthesizes under a file lock, the others wait and read its result; every file is
written to a temporary name and moved into place, so no reader ever sees half a file.

The synth runs in a child process: the engine's process never starts jsii's Node runtime (it
would live as long as the process), and the child reports every gpufill module the app
imported, so an import that INPUTS does not cover fails the synth instead of leaving a stale
cache. The Lambda code and startup/ assets are not inputs: the engine runs the handlers from
the checkout and never reads an asset, so the asset hashes in a cached template may be stale.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[4]
CACHE_DIR = REPO_ROOT / ".cache" / "gpufill-stack"
# Everything the synthesized templates are made from, relative to the repository root.
INPUTS = (
    "cdk.json",
    "cdk/**/*.py",
    "statemachine/**/*.json",
    "functions/gpufill/__init__.py",
    "functions/gpufill/constants.py",
    "functions/gpufill/catalog/**/*",
    "functions/gpufill/adapters/__init__.py",
    "functions/gpufill/adapters/regions_config.py",
    "functions/gpufill/adapters/container.py",  # regions_config's per-function cache
    "functions/gpufill/policy/__init__.py",
    "functions/gpufill/policy/approvers.py",  # the `approvers` setting is checked at synth
)
LIBRARIES = ("aws-cdk-lib", "constructs", "cdk-nag", "jsii")
# Bumped when the cached file's shape changes.
FORMAT = 1


class SynthError(RuntimeError):
    """`cdk synth` of the app failed (a cdk-nag finding, a settings error...): the message has its output."""


def templates(context: dict[str, Any], *, cache_dir: Path = CACHE_DIR, repo: Path = REPO_ROOT) -> dict[str, Any]:
    """The cloud assembly for `context` (env, account, region): {"stacks": [{"name", "account",
    "region", "template"}]}, from the cache when its inputs have not changed."""
    key = digest(context, repo)
    cached = _read(cache_dir / _file_name(context, key))
    if cached is not None:
        return cached
    cache_dir = _writable(cache_dir)
    path = cache_dir / _file_name(context, key)
    with _locked(cache_dir / f"{path.stem}.lock"):
        cached = _read(path)  # another process made it while this one waited
        if cached is not None:
            return cached
        assembly = synthesize(context, repo)
        _check_inputs_cover(assembly.pop("imported"), repo)
        _write(path, {"format": FORMAT, "key": key, **assembly})
        _forget_older(cache_dir, context.get("env", "dev"), keep=path)
        return assembly


def digest(context: dict[str, Any], repo: Path = REPO_ROOT) -> str:
    """A digest of every input of the synth: INPUTS' paths and contents, the libraries, the context."""
    h = hashlib.sha256()
    h.update(json.dumps({"format": FORMAT, "context": context, "python": sys.version_info[:2]}, sort_keys=True).encode())
    for library in LIBRARIES:
        try:
            h.update(f"{library}=={metadata.version(library)}\n".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{library} missing\n".encode())
    for path in input_files(repo):
        h.update(f"{path.relative_to(repo).as_posix()}\n".encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _writable(cache_dir: Path) -> Path:
    """`cache_dir`, or in a read-only checkout the user's temporary directory."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        if os.access(cache_dir, os.W_OK):
            return cache_dir
    except OSError:
        pass
    fallback = Path(tempfile.gettempdir()) / f"gpufill-stack-{os.getuid() if hasattr(os, 'getuid') else 0}"
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


def _file_name(context: dict[str, Any], key: str) -> str:
    return f"{context.get('env', 'dev')}-{key[:20]}.json"


def input_files(repo: Path = REPO_ROOT) -> list[Path]:
    found = {p for pattern in INPUTS for p in repo.glob(pattern) if p.is_file() and "__pycache__" not in p.parts}
    return sorted(found)


def synthesize(context: dict[str, Any], repo: Path = REPO_ROOT) -> dict[str, Any]:
    """Runs the app as `npx cdk synth` would (cdk.json's context under `context`, cdk-nag on)
    in a child Python, and returns its templates and the repository files it imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(repo / "functions"), str(repo / "cdk")])
    env["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "1"  # the child's stderr is only shown on failure
    with tempfile.TemporaryDirectory(prefix="gpufill-synth-") as outdir:
        result = subprocess.run(
            [sys.executable, "-m", "gpufill.local.deploy._synth_app", json.dumps(context), outdir],
            capture_output=True, text=True, env=env, cwd=repo, timeout=600,
        )
        if result.returncode != 0:
            raise SynthError(f"synthesizing the CDK app failed:\n{result.stderr[-4000:]}")
        return json.loads((Path(outdir) / "assembly.json").read_text())


def _check_inputs_cover(imported: list[str], repo: Path) -> None:
    hashed = {str(p) for p in input_files(repo)}
    missing = sorted(p for p in imported if p not in hashed)
    if missing:
        raise SynthError(
            "the CDK app imports files the stack cache does not hash; add them to "
            f"gpufill/local/deploy/synth.py INPUTS: {', '.join(missing)}"
        )


def _read(path: Path) -> dict[str, Any] | None:
    try:
        document = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if document.get("format") != FORMAT:
        return None
    return {"stacks": document["stacks"]}


def _write(path: Path, document: dict[str, Any]) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as file:
            json.dump(document, file)
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would keep it from the other users of the checkout
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _forget_older(cache_dir: Path, env: str, keep: Path) -> None:
    """Templates of older inputs for the same deployment name are never read again."""
    for old in cache_dir.glob(f"{env}-*.json"):
        if old != keep and old.stem.count("-") == keep.stem.count("-"):
            with contextlib.suppress(OSError):
                old.unlink()
                old.with_suffix(".lock").unlink(missing_ok=True)


@contextlib.contextmanager
def _locked(path: Path):
    try:
        import fcntl
    except ImportError:  # no flock: two processes may both synthesize; os.replace keeps it safe
        yield
        return
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
