"""Follow one parameter of a gpufill function through the calls it is passed to, in call order.

    python tools/param_walk.py gpufill.handlers.launch_batch.handler request --assume launch_mode=fleet --assume refill=None

The walk reads the source (ast), never runs it. Starting in the entry function, it visits the
calls of each function body in the order Python makes them (a call's arguments before the call);
a call whose arguments hold the followed parameter, or an attribute of it (`request`,
`request.owner_id`), is a step of the walk into the callee's file. Where the whole parameter is
passed, the walk goes on inside the callee, following the name it has there; each function is
read once (a second call still counts as a step, so recursion and loops end). Only functions of
the gpufill package are followed (module functions, by their own name or through an imported
module); methods and classes are not.

`--assume NAME=VALUE` takes one side of the branches that test an attribute of that name
(`request.launch_mode == "fleet"`, `request.refill is not None`), so the walk follows one kind of
step; a branch it cannot decide is followed on both sides.

It prints the stays (consecutive steps in one file are one stay), then the figures:
- returns: stays in a file the walk had already left;
- climbs: stays one layer up from the stay before (handlers, then adapters, policy, models, and
  bootstrap and catalog at the bottom; docs/architecture.md#the-layers).
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Higher layers first: a handler calls adapters and policy, adapters call policy, policy reads models.
LAYERS = {"handlers": 0, "adapters": 1, "policy": 2, "models": 3, "bootstrap": 4, "catalog": 4}
UNKNOWN = object()


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.get(parts[1], 5) if len(parts) > 2 else 5


@dataclass
class Module:
    name: str
    path: Path
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    # local name -> (module, function or None for a module)
    imported: dict[str, tuple[str, str | None]] = field(default_factory=dict)


def load(name: str, cache: dict[str, Module], functions: Path) -> Module | None:
    if name in cache:
        return cache[name]
    path = functions.joinpath(*name.split(".")).with_suffix(".py")
    if not path.exists():
        path = functions.joinpath(*name.split("."), "__init__.py")
    if not path.exists():
        cache[name] = None
        return None
    tree = ast.parse(path.read_text(), str(path))
    module = Module(name, path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gpufill"):
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                is_module = functions.joinpath(*target.split(".")).with_suffix(".py").exists()
                module.imported[alias.asname or alias.name] = (target, None) if is_module else (node.module, alias.name)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            module.functions[node.name] = node
    cache[name] = module
    return module


def _chain(node: ast.AST) -> tuple[str, list[str]] | None:
    """`a.b.c` -> ("a", ["b", "c"]); None for anything but names and attributes."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return (node.id, attrs[::-1]) if isinstance(node, ast.Name) else None


def _known(test: ast.AST, assume: dict[str, object]) -> object:
    """True or False when the assumptions decide the test, else UNKNOWN."""
    if isinstance(test, ast.BoolOp):
        values = [_known(v, assume) for v in test.values]
        if isinstance(test.op, ast.And):
            if False in values:
                return False
            return True if True in values else UNKNOWN
        if True in values:
            return True
        return False if all(v is False for v in values) else UNKNOWN
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        value = _known(test.operand, assume)
        return UNKNOWN if value is UNKNOWN else not value
    if isinstance(test, ast.NamedExpr):
        return _known(test.value, assume)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.comparators[0], ast.Constant):
        chain = _chain(test.left)
        if chain and chain[1] and chain[1][-1] in assume:
            value, other = assume[chain[1][-1]], test.comparators[0].value
            op = test.ops[0]
            if isinstance(op, (ast.Eq, ast.Is)):
                return value == other
            if isinstance(op, (ast.NotEq, ast.IsNot)):
                return value != other
        return UNKNOWN
    chain = _chain(test)
    if chain and chain[1] and chain[1][-1] in assume:
        return bool(assume[chain[1][-1]])
    return UNKNOWN


@dataclass
class Step:
    module: str
    function: str


class Walk:
    def __init__(self, assume: dict[str, object], functions: Path):
        self.assume = assume
        self.functions = functions
        self.cache: dict[str, Module] = {}
        self.steps: list[Step] = []
        self.read: set[tuple[str, str]] = set()

    def enter(self, module: Module, function: ast.FunctionDef, followed: set[str]) -> None:
        self.steps.append(Step(module.name, function.name))
        if (module.name, function.name) in self.read:
            return
        self.read.add((module.name, function.name))
        self.block(module, function.body, followed)

    def block(self, module: Module, body: list[ast.stmt], followed: set[str]) -> bool:
        """Walk statements in order; True when the block surely ends (return or raise)."""
        for statement in body:
            if isinstance(statement, (ast.If, ast.While)):
                self.condition(module, statement.test, followed)
                known = _known(statement.test, self.assume)
                if known is True:
                    if self.block(module, statement.body, followed) and isinstance(statement, ast.If):
                        return True
                elif known is False:
                    if self.block(module, statement.orelse, followed):
                        return True
                else:
                    self.block(module, statement.body, followed)
                    self.block(module, statement.orelse, followed)
                continue
            if isinstance(statement, (ast.For, ast.With, ast.Try)):
                for name in ("iter", "items"):
                    part = getattr(statement, name, None)
                    for node in part if isinstance(part, list) else [part] if part is not None else []:
                        self.expression(module, node, followed)
                self.block(module, statement.body, followed)
                for handler in getattr(statement, "handlers", []):
                    self.block(module, handler.body, followed)
                self.block(module, getattr(statement, "orelse", []), followed)
                self.block(module, getattr(statement, "finalbody", []), followed)
                continue
            if isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
                continue
            self.expression(module, statement, followed)
            if isinstance(statement, (ast.Return, ast.Raise)):
                return True
        return False

    def condition(self, module: Module, test: ast.AST, followed: set[str]) -> None:
        """A branch's test, as Python evaluates it: `a and b` stops at an `a` known false."""
        if not isinstance(test, ast.BoolOp):
            self.expression(module, test, followed)
            return
        for value in test.values:
            self.condition(module, value, followed)
            if _known(value, self.assume) is (isinstance(test.op, ast.Or)):
                return

    def expression(self, module: Module, node: ast.AST, followed: set[str]) -> None:
        """Every call in `node`, its arguments' calls first."""
        if isinstance(node, ast.Call):
            self.expression(module, node.func, followed)
            for argument in [*node.args, *(k.value for k in node.keywords)]:
                self.expression(module, argument, followed)
            self.call(module, node, followed)
            return
        for child in ast.iter_child_nodes(node):
            self.expression(module, child, followed)

    def resolve(self, module: Module, func: ast.AST) -> tuple[Module, ast.FunctionDef] | None:
        chain = _chain(func)
        if chain is None:
            return None
        name, attrs = chain
        if not attrs and name in module.functions:
            return module, module.functions[name]
        target = module.imported.get(name)
        if target is None:
            return None
        owner_name, function = target
        if function is None and len(attrs) == 1:
            function, attrs = attrs[0], []
        owner = load(owner_name, self.cache, self.functions)
        if attrs or owner is None or function not in owner.functions:
            return None
        return owner, owner.functions[function]

    def call(self, module: Module, node: ast.Call, followed: set[str]) -> None:
        passed = []
        for position, argument in enumerate(node.args):
            passed.append((position, None, argument))
        for keyword in node.keywords:
            if keyword.arg:
                passed.append((None, keyword.arg, keyword.value))
        holding = [(p, k, a) for p, k, a in passed if (c := _chain(a)) and c[0] in followed]
        if not holding:
            return
        target = self.resolve(module, node.func)
        if target is None:
            return
        owner, function = target
        names = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
        inside = set()
        for position, keyword, argument in holding:
            if _chain(argument)[1]:
                continue  # a part of the parameter: the walk stops in the callee
            if keyword is not None:
                inside.add(keyword)
            elif position < len(names):
                inside.add(names[position])
        self.enter(owner, function, inside)


def stays(steps: list[Step]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for step in steps:
        if out and out[-1][0] == step.module:
            out[-1][1].append(step.function)
        else:
            out.append((step.module, [step.function]))
    return out


def figures(walked: list[tuple[str, list[str]]]) -> dict:
    seen: set[str] = set()
    returns = climbs = 0
    previous = None
    for module, _ in walked:
        if module in seen:
            returns += 1
        if previous is not None and layer(module) < layer(previous):
            climbs += 1
        seen.add(module)
        previous = module
    return {"stays": len(walked), "files": len(seen), "returns": returns, "climbs": climbs}


def walk(entry: str, parameter: str, assume: dict[str, object] | None = None, root: Path = ROOT) -> list[tuple[str, list[str]]]:
    """The stays of `parameter` from the function `entry` (module.function) of the checkout at `root`."""
    functions = root / "functions"
    module_name, _, function_name = entry.rpartition(".")
    walker = Walk(assume or {}, functions)
    module = load(module_name, walker.cache, functions)
    if module is None or function_name not in module.functions:
        raise SystemExit(f"entry {entry!r}: no such function under {functions}")
    function = module.functions[function_name]
    if parameter not in {a.arg for a in [*function.args.args, *function.args.kwonlyargs]} and parameter not in {
        n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }:
        raise SystemExit(f"parameter {parameter!r}: not a parameter or local name of {entry}")
    walker.enter(module, function, {parameter})
    return stays(walker.steps)


def _assumption(text: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--assume {text!r}: expected NAME=VALUE")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("entry", help="module.function, e.g. gpufill.handlers.launch_batch.handler")
    parser.add_argument("parameter", help="the parameter (or local name) of the entry to follow")
    parser.add_argument("--assume", action="append", type=_assumption, default=[], metavar="NAME=VALUE")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to read (default: this one)")
    args = parser.parse_args(argv)
    walked = walk(args.entry, args.parameter, dict(args.assume), args.root.resolve())
    seen: set[str] = set()
    previous = None
    for number, (module, functions) in enumerate(walked, 1):
        marks = []
        if module in seen:
            marks.append("return")
        if previous is not None and layer(module) < layer(previous):
            marks.append("climb")
        seen.add(module)
        previous = module
        print(f"{number:3}  {module.removeprefix('gpufill.'):32} {', '.join(functions)}{'  [' + ', '.join(marks) + ']' if marks else ''}")
    got = figures(walked)
    print(f"{got['stays']} stays in {got['files']} files, {got['returns']} returns, {got['climbs']} climbs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
