#!/usr/bin/env python3
"""The Python checks of CI's stage 0 (tools/check_style.sh runs this; docs/testing.md):

1. pyflakes (Debian's python3-pyflakes) over every tracked .py file: unused imports and
   variables, undefined names, redefinitions, ... Each report fails the check unless its line
   carries ``# noqa`` or ``# noqa: CODE`` with flake8's code for that report (F401, F841, ...),
   as flake8 would read it.
2. The layers of the ipupod package (python/ipupod; docs/python.md, "The package's layers").
   Every import of a package module, read with ast wherever it stands (module level, inside
   ``if TYPE_CHECKING:``, in a function), must
   * go to a module of the importer's layer or a lower one (LAYERS, bottom first);
   * close no cycle (Python imports a cycle's modules half-initialised, in whatever order the
     first import happens to take);
   * stand at module level: an import inside a function hides a cycle from import order;
   * name modules and public names only: ``from ipupod.m import _helper`` couples one module
     to another's internals (a private module, ``from ipupod import _proto``, is fine).
   Every module of the package must be in LAYERS.

    tools/check_python.py                    both checks, over the tree
    tools/check_python.py --layers DIR       the layer check of the package in DIR (e.g. a
                                             copy with a planted cycle: tests/tools)
    tools/check_python.py --pyflakes FILE..  pyflakes of these files

Prints what is wrong, with file and line; exits 1 if anything is.
"""

import argparse
import ast
import os
import re
import subprocess
import sys
from typing import Dict, Iterator, List, NamedTuple, Optional, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIR = os.path.join(ROOT, "python", "ipupod")

#: The package's layers, bottom first: a module may import its own layer and those below.
#: ``NAME.*`` stands for every module below package NAME (not NAME itself).
LAYERS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    # errors, the generated stubs, the tensor codec, what uploads are made of
    ("leaves", ("ipupod.errors", "ipupod._proto", "ipupod.v1", "ipupod.v1.*", "ipupod.tensors",
                "ipupod.sources")),
    # the channel, the caller's identity, TLS, the status mapping
    ("transport", ("ipupod.transport",)),
    # every RPC with deadlines and errors (Calls), and the attach stream
    ("calls", ("ipupod.calls", "ipupod.attach")),
    # what the calls are used for: sessions, runs, jobs, compiling, the audit log
    ("sessions and jobs", ("ipupod.runs", "ipupod.compiling", "ipupod.session", "ipupod.jobs",
                           "ipupod.audit")),
    ("client", ("ipupod.client",)),
    # the public names, and the pytest plugin
    ("package", ("ipupod", "ipupod.testing")),
    # the PopTorch front end, then its public namespace
    ("poptorch", ("ipupod.poptorch.*",)),
    ("poptorch package", ("ipupod.poptorch",)),
)

#: flake8's codes of pyflakes' messages (flake8/plugins/pyflakes.py), for ``# noqa: CODE``.
FLAKE8_CODES = {
    "UnusedImport": "F401", "ImportShadowedByLoopVar": "F402", "ImportStarUsed": "F403",
    "LateFutureImport": "F404", "ImportStarUsage": "F405", "ImportStarNotPermitted": "F406",
    "FutureFeatureNotDefined": "F407", "PercentFormatInvalidFormat": "F501",
    "PercentFormatExpectedMapping": "F502", "PercentFormatExpectedSequence": "F503",
    "PercentFormatExtraNamedArguments": "F504", "PercentFormatMissingArgument": "F505",
    "PercentFormatMixedPositionalAndNamed": "F506",
    "PercentFormatPositionalCountMismatch": "F507", "PercentFormatStarRequiresSequence": "F508",
    "PercentFormatUnsupportedFormatCharacter": "F509", "StringDotFormatInvalidFormat": "F521",
    "StringDotFormatExtraNamedArguments": "F522",
    "StringDotFormatExtraPositionalArguments": "F523", "StringDotFormatMissingArgument": "F524",
    "StringDotFormatMixingAutomatic": "F525", "FStringMissingPlaceholders": "F541",
    "MultiValueRepeatedKeyLiteral": "F601", "MultiValueRepeatedKeyVariable": "F602",
    "TooManyExpressionsInStarredAssignment": "F621", "TwoStarredExpressions": "F622",
    "AssertTuple": "F631", "IsLiteral": "F632", "InvalidPrintSyntax": "F633", "IfTuple": "F634",
    "BreakOutsideLoop": "F701", "ContinueOutsideLoop": "F702", "YieldOutsideFunction": "F704",
    "ReturnOutsideFunction": "F706", "DefaultExceptNotLast": "F707",
    "DoctestSyntaxError": "F721", "ForwardAnnotationSyntaxError": "F722",
    "RedefinedWhileUnused": "F811", "UndefinedName": "F821", "UndefinedExport": "F822",
    "UndefinedLocal": "F823", "DuplicateArgument": "F831", "UnusedVariable": "F841",
    "UnusedAnnotation": "F842", "RaiseNotImplemented": "F901",
}
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z][0-9]+(?:[,\s]+[A-Z][0-9]+)*))?",
                   re.IGNORECASE)

# ---------------------------------------------------------------------- pyflakes


def shown(path: str) -> str:
    """A path as messages show it: relative to the source tree when inside it."""
    path = os.path.abspath(path)
    return os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path


def python_files(root: str) -> List[str]:
    """The tracked .py files (git), else every .py file outside build and hidden folders."""
    try:
        listed = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", "*.py"],
                                capture_output=True, check=True).stdout.decode()
        return sorted(os.path.join(root, p) for p in listed.split("\0") if p)
    except (OSError, subprocess.CalledProcessError):
        found = []
        for folder, subfolders, files in os.walk(root):
            subfolders[:] = [d for d in subfolders if not d.startswith((".", "build"))]
            found += [os.path.join(folder, f) for f in files if f.endswith(".py")]
        return sorted(found)


def suppressed(line: str, code: str) -> bool:
    """Whether a ``# noqa`` comment on the line covers ``code`` (bare: every code)."""
    match = _NOQA.search(line)
    if match is None:
        return False
    codes = match.group("codes")
    return codes is None or code.upper() in re.split(r"[,\s]+", codes.upper())


def pyflakes_problems(paths: List[str]) -> List[str]:
    """pyflakes' reports on ``paths`` that no ``# noqa`` covers, as "path:line:col: CODE text"."""
    try:
        from pyflakes import api, reporter
    except ImportError:
        return ["pyflakes is not installed: install Debian's python3-pyflakes "
                "(deploy/install-deps.sh lists it) and run this with /usr/bin/python3"]
    problems: List[str] = []

    class Collect(reporter.Reporter):
        def __init__(self, lines: List[str]) -> None:
            self.lines = lines

        def unexpectedError(self, filename, message):  # noqa: N802 - pyflakes' name
            problems.append(f"{filename}: {message}")

        def syntaxError(self, filename, message, lineno, offset, text):  # noqa: N802
            problems.append(f"{filename}:{lineno}:{offset or 0}: E999 {message}")

        def flake(self, message):
            code = FLAKE8_CODES.get(type(message).__name__, "F999")
            line = self.lines[message.lineno - 1] if message.lineno <= len(self.lines) else ""
            if not suppressed(line, code):
                problems.append(f"{message.filename}:{message.lineno}:{message.col + 1}: "
                                f"{code} {message.message % message.message_args}")

    for path in paths:
        with open(path, encoding="utf-8") as file:
            source = file.read()
        api.check(source, shown(path), Collect(source.splitlines()))
    return problems


# ---------------------------------------------------------------------- layers


class Import(NamedTuple):
    target: str  # the package module imported
    line: int
    in_function: bool
    private_name: Optional[str]  # `from target import _name`: the private name


def modules_of(package_dir: str) -> Dict[str, str]:
    """Module name -> file of every module in the package at ``package_dir``."""
    root = os.path.basename(os.path.normpath(package_dir))
    modules = {}
    for folder, subfolders, files in os.walk(package_dir):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        relative = os.path.relpath(folder, package_dir)
        parts = [root] + ([] if relative == "." else relative.split(os.sep))
        for name in sorted(files):
            if name.endswith(".py"):
                stem = name[:-3]
                modules[".".join(parts if stem == "__init__" else parts + [stem])] = \
                    os.path.join(folder, name)
    return modules


def layer_of(module: str) -> Optional[int]:
    """The index in LAYERS of ``module``'s layer; an exact name wins over ``NAME.*``."""
    for index, (_, members) in enumerate(LAYERS):
        if module in members:
            return index
    for index, (_, members) in enumerate(LAYERS):
        if any(m.endswith(".*") and module.startswith(m[:-1]) for m in members):
            return index
    return None


class _ImportReader(ast.NodeVisitor):
    """The package imports of one module's syntax tree."""

    def __init__(self, module: str, is_package: bool, known: Set[str]) -> None:
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.root = module.split(".")[0]
        self.known = known
        self.depth = 0  # functions we are inside
        self.found: List[Import] = []

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function  # noqa: N815

    def _add(self, target: str, node: ast.AST, private_name: Optional[str] = None) -> None:
        if target == self.root or target.startswith(self.root + "."):
            self.found.append(Import(target, node.lineno, self.depth > 0, private_name))

    def visit_Import(self, node: ast.Import) -> None:  # noqa: N802 - ast's name
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:  # noqa: N802 - ast's name
        base = node.module or ""
        if node.level:
            parts = self.package.split(".")
            parts = parts[:len(parts) - (node.level - 1)]
            base = ".".join(parts + ([base] if base else []))
        for alias in node.names:
            candidate = f"{base}.{alias.name}"
            if candidate in self.known:
                self._add(candidate, node)
            else:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                self._add(base, node, alias.name if private else None)


def imports_of(modules: Dict[str, str]) -> Dict[str, List[Import]]:
    """Module -> its imports of package modules."""
    found = {}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as file:
            tree = ast.parse(file.read(), path)
        reader = _ImportReader(module, path.endswith("__init__.py"), set(modules))
        reader.visit(tree)
        found[module] = list(dict.fromkeys(reader.found))  # `from m import a, b`: one import
    return found


def find_cycles(graph: Dict[str, Set[str]]) -> List[Tuple[List[str], List[str]]]:
    """Each strongly connected component of more than one module, or of one module importing
    itself (Tarjan's algorithm), and one cycle through it (a path back to its start)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    components: List[List[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                connect(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [(c, _cycle_in(c, graph)) for c in components
            if len(c) > 1 or c[0] in graph.get(c[0], ())]


def _cycle_in(component: List[str], graph: Dict[str, Set[str]]) -> List[str]:
    """A path from the component's first module back to it, inside the component."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:  # breadth first: the shortest such cycle
        node = queue.pop(0)
        for successor in sorted(graph.get(node, ())):
            if successor == start:
                return paths[node] + [start]
            if successor in members and successor not in paths:
                paths[successor] = paths[node] + [successor]
                queue.append(successor)
    return component + [start]  # not reached: a component's members reach each other


def _import_problems(module: str, path: str, imports: List[Import],
                     modules: Dict[str, str]) -> Iterator[str]:
    own = layer_of(module)
    for found in imports:
        where = f"{path}:{found.line}"
        target_layer = layer_of(found.target)
        if found.target not in modules and target_layer is None:
            yield f"{where}: {module} imports {found.target}, which is no module of the package"
            continue
        if found.in_function:
            yield (f"{where}: {module} imports {found.target} inside a function; import "
                   f"package modules at the top (a function-level import hides a cycle from "
                   f"import order)")
        if found.private_name:
            yield (f"{where}: {module} imports {found.private_name} from {found.target}, a "
                   f"private name of another module; give it a public name in a module both "
                   f"may import")
        if own is not None and target_layer is not None and target_layer > own:
            yield (f"{where}: {module} (layer '{LAYERS[own][0]}') imports {found.target} "
                   f"(layer '{LAYERS[target_layer][0]}'), a higher layer; move what it needs "
                   f"down, or the import up")


def layer_problems(package_dir: str) -> List[str]:
    """Everything wrong with the package's imports (see the module doc)."""
    modules = modules_of(package_dir)
    imports = imports_of(modules)
    files = {m: shown(p) for m, p in modules.items()}
    problems = [f"{files[m]}: {m} is in no layer: add it to LAYERS in tools/check_python.py "
                f"(and to docs/python.md, \"The package's layers\")"
                for m in modules if layer_of(m) is None]
    for module in modules:
        problems += _import_problems(module, files[module], imports[module], modules)
    graph = {m: {i.target for i in imports[m] if i.target != m} for m in modules}
    for component, cycle in find_cycles(graph):
        steps = []
        for here, there in zip(cycle, cycle[1:]):
            line = next(i.line for i in imports[here] if i.target == there)
            steps.append(f"{here} ({files[here]}:{line})")
        tangle = (f" (one of the cycles among {len(component)} modules: "
                  f"{', '.join(component)})" if len(component) > len(cycle) - 1 else "")
        problems.append(f"import cycle: {' -> '.join(steps)} -> {cycle[-1]}{tangle}")
    return problems


# ---------------------------------------------------------------------- main


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", metavar="DIR", help="only the layer check, of this package")
    parser.add_argument("--pyflakes", metavar="FILE", nargs="+", help="only pyflakes, of these")
    args = parser.parse_args(argv)
    problems: List[str] = []
    if args.layers is None:
        files = args.pyflakes or python_files(ROOT)
        flakes = pyflakes_problems(files)
        problems += flakes
        if not flakes:
            print(f"check_python: pyflakes: {len(files)} files clean")
    if args.pyflakes is None:
        package = args.layers or PACKAGE_DIR
        wrong = layer_problems(package)
        problems += wrong
        if not wrong:
            print(f"check_python: layers: the {len(modules_of(package))} modules of "
                  f"{shown(package)} keep to {len(LAYERS)} layers, without a cycle")
    for problem in problems:
        print(f"check_python: {problem}")
    if problems:
        print(f"check_python: {len(problems)} problem(s); docs/python.md, \"The package's "
              f"layers\", says how the package is layered")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
