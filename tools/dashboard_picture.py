"""A picture of the deployment's CloudWatch dashboard, drawn from the synthesized template.

    python tools/dashboard_picture.py                      # synthesize the app, print the SVG
    python tools/dashboard_picture.py --write              # ... and write docs/dashboard.svg
    python tools/dashboard_picture.py --template T.json    # read a template `cdk synth` wrote

It reads the AWS::CloudWatch::Dashboard's DashboardBody (an Fn::Join of text and references:
each reference is drawn as a placeholder, never resolved) and draws CloudWatch's grid, 24 units
wide: every widget at its x, y, width and height, with its title and the metrics it reads
(namespace and name; a SEARCH expression by the metric name it searches for; an alarm widget by
how many alarms it shows). Nothing is fetched: the picture is the definition, not its data, so
it is the same for every account, region and deployment name. tests/infra checks that
docs/dashboard.svg is what this draws from the suite's own synth.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PICTURE = ROOT / "docs" / "dashboard.svg"
# CloudWatch's grid is 24 units wide; one unit drawn this many pixels wide, one row this high.
UNIT_WIDTH, UNIT_HEIGHT = 40, 28
MARGIN, LINE = 8, 15
SEARCHED = re.compile(r'MetricName=\\?"(\w+)\\?"')


def dashboard_body(template: dict) -> dict:
    """The one dashboard's body, its references as placeholders."""
    found = [r for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Dashboard"]
    if len(found) != 1:
        raise SystemExit(f"the template holds {len(found)} dashboards; one was expected")
    return json.loads(_text(found[0]["Properties"]["DashboardBody"]))


def _text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_text(part) for part in parts)
    return "REF"  # a Ref or Fn::GetAtt inside a JSON string: a placeholder that keeps the JSON valid


def metric_names(widget: dict) -> list[str]:
    """What a widget reads, in its order, each once: `namespace/name`, or `SEARCH name`."""
    props = widget.get("properties", {})
    if widget.get("type") == "alarm":
        return [f"{len(props.get('alarms', []))} alarms"]
    labels: dict[str, list[str]] = {}
    for metric in props.get("metrics", []):  # both axes: a right-axis metric says so in its options
        options = metric[-1] if isinstance(metric[-1], dict) else {}
        if isinstance(metric[0], dict) and "expression" in metric[0]:
            for name in SEARCHED.findall(metric[0]["expression"]):
                labels.setdefault(f"SEARCH {name}", [])
        elif isinstance(metric[0], str):
            said = labels.setdefault(f"{metric[0]}/{metric[1]}", [])
            if options.get("label"):
                said.append(options["label"])
    return [f"{name} ({', '.join(said)})" if said else name for name, said in labels.items()]


def draw(body: dict) -> str:
    """The SVG of the body's widgets on CloudWatch's grid (deterministic: the same body, the same bytes)."""
    widgets = body.get("widgets", [])
    rows = max((w["y"] + w["height"] for w in widgets), default=0)
    width, height = 24 * UNIT_WIDTH + 2 * MARGIN, rows * UNIT_HEIGHT + 2 * MARGIN
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="Helvetica, Arial, sans-serif">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#f4f5f7"/>',
    ]
    for w in widgets:
        x, y = MARGIN + w["x"] * UNIT_WIDTH, MARGIN + w["y"] * UNIT_HEIGHT
        box_w, box_h = w["width"] * UNIT_WIDTH - 4, w["height"] * UNIT_HEIGHT - 4
        title = w.get("properties", {}).get("title", w.get("type", ""))
        out.append(f'<g><rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="3" fill="#ffffff" stroke="#8d99a8"/>')
        out.append(f'<text x="{x + 8}" y="{y + 18}" font-size="13" font-weight="bold" fill="#16191f">{escape(title)}</text>')
        out.append(f'<text x="{x + box_w - 8}" y="{y + box_h - 8}" font-size="10" fill="#687078" text-anchor="end">'
                   f'{w.get("type", "")} widget, {w["width"]}x{w["height"]} at ({w["x"]},{w["y"]})</text>')
        room = max(0, (box_h - 44) // LINE)
        names = metric_names(w)
        shown = names if len(names) <= room else [*names[: max(0, room - 1)], f"... and {len(names) - room + 1} more"]
        for n, name in enumerate(shown):
            out.append(f'<text x="{x + 12}" y="{y + 36 + n * LINE}" font-size="11" fill="#414750">{escape(name)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def synthesize() -> dict:
    """The home stack's template, synthesized as tests/infra synthesizes it (cdk.json's context,
    a fixed account and region: no credentials, no network)."""
    import os
    import tempfile

    # This checkout's app and package, whatever the venv was installed from (a git worktree).
    sys.path[:0] = [str(ROOT / "cdk"), str(ROOT / "functions")]
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    from gpufill_stack.deployment import build_app, new_app

    with tempfile.TemporaryDirectory() as outdir:
        app = new_app(context={"account": "123456789012", "region": "us-east-1"}, outdir=outdir)
        stack = build_app(app)
        app.synth()
        return json.loads((Path(outdir) / f"{stack.artifact_id}.template.json").read_text())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--template", type=Path, help="a synthesized template (default: synthesize the app)")
    parser.add_argument("--write", action="store_true", help=f"write {PICTURE.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    template = json.loads(args.template.read_text()) if args.template else synthesize()
    picture = draw(dashboard_body(template))
    if args.write:
        PICTURE.write_text(picture)
        print(f"wrote {PICTURE.relative_to(ROOT)}")
    else:
        sys.stdout.write(picture)


if __name__ == "__main__":
    main()
