"""Child process of synth.synthesize: `python -m gpufill.local.deploy._synth_app CONTEXT_JSON OUTDIR`.

Builds the app exactly as cdk/app.py and tests/infra do (gpufill_stack.deployment), synthesizes it
(cdk-nag included: a finding fails here as it fails `cdk synth`), and writes OUTDIR/assembly.json:
every stack's template, and the repository files the app imported.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(context_json: str, outdir: str) -> None:
    from gpufill_stack.deployment import build_app, new_app

    repo = Path(__file__).resolve().parents[4]
    app = new_app(context=json.loads(context_json), outdir=str(Path(outdir) / "cdk.out"))
    build_app(app)
    assembly = app.synth()
    stacks = [
        {
            "name": stack.stack_name,
            "account": stack.environment.account,
            "region": stack.environment.region,
            "template": stack.template,
        }
        for stack in assembly.stacks
    ]
    # The app's own modules; the local engine (this module's package) is not part of the app.
    sources = (repo / "cdk", repo / "functions")
    imported = sorted(
        str(path)
        for path in (Path(m.__file__).resolve() for m in list(sys.modules.values()) if getattr(m, "__file__", None))
        if any(path.is_relative_to(s) for s in sources) and not path.is_relative_to(repo / "functions/gpufill/local")
    )
    (Path(outdir) / "assembly.json").write_text(json.dumps({"stacks": stacks, "imported": imported}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
