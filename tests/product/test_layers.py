"""The package's import structure, read from the source (no biomoe module is imported).

Four rules, each a test:

* **no package-level cycles**: ``biomoe.<package>`` (a top-level module such as ``build.py`` is its
  own node) never imports, directly or through others, a package that imports it back: a cycle
  means neither side can be understood, tested or replaced without the other;
* **layers**: a package imports only packages of its own layer or below (:data:`LAYERS`), so the
  model never learns which kernels, strategies or commands use it; the subpackages of
  ``biomoe.training`` keep the same two rules among themselves (:data:`TRAINING_LAYERS`);
* **private internals only in compat**: a private name (``_x``, not a dunder) of torch, Lightning,
  Transformer Engine, transformers or jsonargparse is used only in ``biomoe/compat/``, where each
  use is listed with the versions it was tested with. A subclass may override a private method
  only where ``OVERRIDDEN`` in that compat module lists it;
* **no benchmark**: nothing in ``biomoe/`` imports the top-level ``bench`` package, which a clone
  has and an installed biomoe does not.

Every import counts: module-level and function-local ``import``/``from`` statements and
``importlib.import_module("biomoe...")`` / ``__import__("biomoe...")`` with a literal name.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT as REPO

PACKAGE = "biomoe"

LAYERS: list[tuple[str, ...]] = [
    ("cli",),
    ("interop",),
    ("training",),
    ("inference",),
    ("genomics",),
    ("data",),
    ("build",),
    ("parallel", "backends"),
    ("checkpoint",),
    ("model",),
    ("compat", "files", "output_checks", "output_set", "temporaries", "user_text", "errors", "progress",
     "precisions", "checks", "resources"),
]
"""Top to bottom: a node may import its own layer and the layers below it, never one above."""

TRAINING_LAYERS: list[tuple[str, ...]] = [
    ("training.step", "training.guards"),
    ("training.optimization", "training.reports"),
]
"""``biomoe.training``'s subpackages, top to bottom: the LightningModule and the callbacks that guard
a run use the optimizers and the reports, which know nothing of either."""

LIBRARIES: dict[str, str] = {
    "torch": "torch", "lightning": "lightning", "lightning_fabric": "lightning",
    "pytorch_lightning": "lightning", "transformer_engine": "transformer_engine",
    "transformers": "transformers", "jsonargparse": "jsonargparse",
}
"""Top-level module -> the compat module (``biomoe/compat/<name>.py``) that owns its internals."""

COMPAT_DIR = f"{PACKAGE}/compat/"

NAMED_TUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_field_defaults", "_make"})
"""Public API of ``collections.namedtuple`` despite the underscore."""


# ---------------------------------------------------------------------------------- sources
def package_sources(root: Path = REPO) -> dict[str, str]:
    """Every ``biomoe/**/*.py`` as ``{"biomoe/x/y.py": source}``."""
    return {path.relative_to(root).as_posix(): path.read_text(encoding="utf-8")
            for path in sorted((root / PACKAGE).rglob("*.py"))}


def module_name(path: str) -> str:
    """``biomoe/model/moe/experts.py`` -> ``biomoe.model.moe.experts`` (``__init__`` -> the package)."""
    parts = path[:-len(".py")].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# ------------------------------------------------------------------------- the import graph
@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` (package-level nodes) at ``where`` (``path:line``)."""

    source: str
    target: str
    where: str


def node_of(module: str, known: set[str]) -> str | None:
    """The package-level node of a biomoe module: ``biomoe.<pkg>``, or a top-level module's own
    name, or ``biomoe`` for the package's ``__init__``; None outside biomoe."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    if len(parts) == 1:
        return PACKAGE
    node = f"{PACKAGE}.{parts[1]}"
    return node if node in known or any(m.startswith(node + ".") for m in known) else PACKAGE


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([name] if name else []))


MODULE_STRING = re.compile(r"biomoe(\.\w+)+(:\w+)?")
"""A string that names a biomoe module (``"biomoe.x.y"``, ``"biomoe.x.y:main"``, a class path)."""


def imported_modules(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> Iterator[tuple[str, int]]:
    """``(module, line)`` for every import in the tree, at any depth; ``from pkg import sub``
    yields ``pkg.sub`` where ``sub`` is a module of the package. A string outside docstrings
    that names a biomoe module counts too: a table of module names imported in a loop is an
    import all the same."""
    yield from _named_in_strings(tree, known)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = (_resolve_relative(module, is_package, node.level, node.module) if node.level
                    else node.module or "")
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in known else base), node.lineno
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                yield node.args[0].value, node.lineno


def _named_in_strings(tree: ast.AST, known: set[str]) -> Iterator[tuple[str, int]]:
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                and MODULE_STRING.fullmatch(node.value):
            parts = node.value.split(":")[0].split(".")
            prefix = next((".".join(parts[:n]) for n in range(len(parts), 1, -1) if ".".join(parts[:n]) in known), None)
            if prefix is not None:
                yield prefix, node.lineno


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in ("__import__", "import_module")
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def import_edges(sources: Mapping[str, str]) -> list[Edge]:
    """Package-level edges between different nodes, one per import statement."""
    known = {module_name(p) for p in sources}
    edges = []
    for path, text in sources.items():
        module = module_name(path)
        source = node_of(module, known)
        tree = ast.parse(text, filename=path)
        for target_module, line in imported_modules(tree, module, path.endswith("__init__.py"), known):
            target = node_of(target_module, known)
            if target is not None and target != source:
                edges.append(Edge(source, target, f"{path}:{line}"))
    return edges


def subpackage_edges(sources: Mapping[str, str], package: str) -> list[Edge]:
    """Edges between the subpackages of ``package`` (``biomoe.training.step`` ->
    ``biomoe.training.optimization``), one per import statement; a module directly in ``package``
    is no node."""
    known = {module_name(p) for p in sources}
    depth = len(package.split(".")) + 1
    subpackages = {module_name(p) for p in sources if p.endswith("/__init__.py")
                   and module_name(p).startswith(package + ".") and len(module_name(p).split(".")) == depth}

    def node(module: str) -> str | None:
        candidate = ".".join(module.split(".")[:depth])
        return candidate if candidate in subpackages else None

    edges = []
    for path, text in sources.items():
        module = module_name(path)
        source = node(module)
        if source is None:
            continue
        tree = ast.parse(text, filename=path)
        for target_module, line in imported_modules(tree, module, path.endswith("__init__.py"), known):
            target = node(target_module)
            if target is not None and target != source:
                edges.append(Edge(source, target, f"{path}:{line}"))
    return edges


def strongly_connected(edges: Iterable[Edge]) -> list[set[str]]:
    """Tarjan's components with more than one node: exactly the nodes that lie on a cycle."""
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def cycle_report(edges: list[Edge]) -> list[str]:
    """One paragraph per cycle: its packages, then each import that closes it (file:line)."""
    report = []
    for component in strongly_connected(edges):
        inside = sorted({(e.source, e.target) for e in edges if e.source in component and e.target in component})
        lines = [f"cycle between {', '.join(sorted(component))}:"]
        for source, target in inside:
            where = sorted({e.where for e in edges if (e.source, e.target) == (source, target)}, key=_file_line)
            lines.append(f"  {source} -> {target}: {', '.join(where)}")
        report.append("\n".join(lines))
    return report


def _file_line(where: str) -> tuple[str, int]:
    path, _, line = where.rpartition(":")
    return path, int(line)


def layer_of(node: str, layers: list[tuple[str, ...]]) -> int | None:
    short = node.split(".", 1)[1] if "." in node else node
    return next((i for i, names in enumerate(layers) if short in names), None)


def layer_report(edges: list[Edge], layers: list[tuple[str, ...]] = LAYERS, name: str = "LAYERS") -> list[str]:
    """Every import from a lower layer to a higher one, and every node ``layers`` (called ``name``)
    misses."""
    problems = []
    for node in sorted({n for e in edges for n in (e.source, e.target)} - {PACKAGE}):
        if layer_of(node, layers) is None:
            problems.append(f"{node} is in no layer of {name}")
    for e in edges:
        if e.source == PACKAGE or e.target == PACKAGE:
            if e.target == PACKAGE:  # ``from biomoe import X``: the façade imports the model
                problems.append(f"{e.where}: imports the biomoe package façade; import the module instead")
            continue
        low, high = layer_of(e.source, layers), layer_of(e.target, layers)
        if low is not None and high is not None and high < low:
            problems.append(f"{e.where}: {e.source} (layer {low}) imports {e.target} (layer {high}, above it)")
    return list(dict.fromkeys(problems))


# ----------------------------------------------------------------- private library internals
def library_of(dotted: str) -> str | None:
    return LIBRARIES.get(dotted.split(".")[0])


def library_bindings(tree: ast.AST) -> dict[str, str]:
    """Names a module binds to library objects (any scope): ``import torch.nn.functional as F``
    -> ``{"F": "torch.nn.functional"}``; ``from lightning.pytorch import Trainer`` ->
    ``{"Trainer": "lightning.pytorch.Trainer"}``."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if library_of(alias.name):
                    bound[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level and library_of(node.module):
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def dotted_name(expr: ast.expr, bound: Mapping[str, str]) -> str | None:
    """``L.LightningModule`` -> ``lightning.LightningModule`` when its root is a library name."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name) and expr.id in bound:
        return ".".join([bound[expr.id]] + parts[::-1])
    return None


def _chain_root(expr: ast.expr) -> ast.expr:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return expr


@functools.lru_cache(maxsize=None)
def import_object(dotted: str) -> object | None:
    """The library object ``dotted`` names, or None where it cannot be imported here (no TE)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


@functools.lru_cache(maxsize=None)
def library_private_names(dotted: str) -> frozenset[str] | None:
    """Private attributes a library class owns: those of its MRO, and the ``self._x`` its methods
    read or set. None where the class cannot be imported (it then owns every name biomoe's
    subclass does not define itself)."""
    cls = import_object(dotted)
    if not isinstance(cls, type):
        return None
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is object:
            continue
        names |= {n for n in vars(klass) if is_private(n)}
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and is_private(node.attr) and \
                    isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and is_private(node.value) \
                    and node.value.isidentifier():
                names.add(node.value)  # super().__setattr__("_parameters", ...)
    return frozenset(names)


@dataclass
class ClassInfo:
    module: str
    node: ast.ClassDef
    bases: list[tuple[str, str]]
    """("lib", dotted) or ("biomoe", "module:Class") per resolvable base."""
    defined: set[str]
    """Private names the class defines: methods, class attributes, ``self._x = ...``."""


def _self_assigned(cls: ast.ClassDef) -> set[str]:
    names = set()
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    names.add(t.attr)
    return names


def _class_body_names(cls: ast.ClassDef) -> set[str]:
    names = set()
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            names |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            names.add(stmt.target.id)
    return names


class Package:
    """The parsed package: its classes, what biomoe defines itself, and the library bindings."""

    def __init__(self, sources: Mapping[str, str]) -> None:
        self.trees = {path: ast.parse(text, filename=path) for path, text in sources.items()}
        self.bindings = {path: library_bindings(tree) for path, tree in self.trees.items()}
        self.classes: dict[str, ClassInfo] = {}
        for path, tree in self.trees.items():
            self._read_module(path, tree)
        self.own_names = self._own_private_names()

    def _read_module(self, path: str, tree: ast.AST) -> None:
        module = module_name(path)
        imports = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE):
                for alias in node.names:
                    imports[alias.asname or alias.name] = f"{node.module}:{alias.name}"
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = []
                for base in node.bases:
                    lib = dotted_name(base, self.bindings[path])
                    if lib is not None:
                        bases.append(("lib", lib))
                    elif isinstance(base, ast.Name):
                        bases.append(("biomoe", imports.get(base.id, f"{module}:{base.id}")))
                defined = {n for n in _class_body_names(node) | _self_assigned(node) if is_private(n)}
                self.classes[f"{module}:{node.name}"] = ClassInfo(module, node, bases, defined)

    def library_bases(self, key: str, seen: frozenset[str] = frozenset()) -> list[str]:
        """Library classes ``key`` derives from, through biomoe classes too."""
        info = self.classes.get(key)
        if info is None or key in seen:
            return []
        found = []
        for kind, name in info.bases:
            found += [name] if kind == "lib" else self.library_bases(name, seen | {key})
        return found

    def biomoe_defined(self, key: str, seen: frozenset[str] = frozenset()) -> set[str]:
        """Private names ``key`` and its biomoe base classes define (overrides included)."""
        info = self.classes.get(key)
        if info is None or key in seen:
            return set()
        names = set(info.defined)
        for kind, name in info.bases:
            if kind == "biomoe":
                names |= self.biomoe_defined(name, seen | {key})
        return names

    def _own_private_names(self) -> set[str]:
        """Private names biomoe itself defines anywhere: module globals, functions, classes, and
        attributes of classes that derive from no library class."""
        names: set[str] = set(NAMED_TUPLE_API)
        for tree in self.trees.values():
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and is_private(node.name):
                    names.add(node.name)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and is_private(node.id):
                    names.add(node.id)
        for key, info in self.classes.items():
            bases = self.library_bases(key)
            owned = set().union(*(library_private_names(b) or set() for b in bases)) if bases else set()
            names |= info.defined - owned
        return names


def overridden_methods(sources: Mapping[str, str]) -> dict[str, set[str]]:
    """``OVERRIDDEN`` of every compat module, read from its source: class path -> method names."""
    table: dict[str, set[str]] = defaultdict(set)
    for path, text in sources.items():
        if not path.startswith(COMPAT_DIR):
            continue
        for node in ast.walk(ast.parse(text)):
            target = node.target if isinstance(node, ast.AnnAssign) else \
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
            if isinstance(target, ast.Name) and target.id == "OVERRIDDEN" and node.value is not None:
                for cls, methods in ast.literal_eval(node.value).items():
                    table[cls] |= set(methods)
    return dict(table)


def _listed(method: str, bases: list[str], overridden: Mapping[str, set[str]]) -> bool:
    """``method`` of a library base is listed in OVERRIDDEN for that class or one of its parents."""
    for base in bases:
        cls = import_object(base)
        for listed, methods in overridden.items():
            if method not in methods:
                continue
            if listed == base:
                return True
            parent = import_object(listed)
            if isinstance(cls, type) and isinstance(parent, type) and issubclass(cls, parent):
                return True
    return False


class _PrivateUses(ast.NodeVisitor):
    """Collects one module's private library uses (see :func:`private_uses`)."""

    def __init__(self, package: Package, path: str, overridden: Mapping[str, set[str]]) -> None:
        self.package, self.path, self.overridden = package, path, overridden
        self.module = module_name(path)
        self.bound = package.bindings[path]
        self.found: list[str] = []
        self.classes: list[str] = []
        self.self_names: dict[str, str] = {}
        self.other_modules = _non_library_imports(package.trees[path]) - set(self.bound)

    def report(self, node: ast.AST, text: str) -> None:
        self.found.append(f"{self.path}:{node.lineno}: {text}")

    # --- imports
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if library_of(alias.name) and any(is_private(p) for p in alias.name.split(".")):
                self.report(node, f"import {alias.name} (private module)")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and not node.level and library_of(node.module):
            if any(is_private(p) for p in node.module.split(".")):
                self.report(node, f"from {node.module} import ... (private module)")
            for alias in node.names:
                if is_private(alias.name):
                    self.report(node, f"from {node.module} import {alias.name}")

    # --- classes and their methods
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        key = f"{self.module}:{node.name}"
        bases = self.package.library_bases(key)
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_private(stmt.name) and bases \
                    and self._library_owns(key, stmt.name, own_definitions=False) \
                    and not _listed(stmt.name, bases, self.overridden):
                self.report(stmt, f"{node.name}.{stmt.name} overrides a private method of {', '.join(bases)} "
                                  "not listed in compat OVERRIDDEN")
        self.classes.append(key)
        self.generic_visit(node)
        self.classes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        saved = dict(self.self_names)
        in_class_body = self.classes and any(node is s for s in self.package.classes[self.classes[-1]].node.body)
        if in_class_body and node.args.args:
            self.self_names[node.args.args[0].arg] = self.classes[-1]
        self.generic_visit(node)
        self.self_names = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def _library_owns(self, key: str, name: str, own_definitions: bool = True) -> bool:
        """``name`` belongs to a library base of class ``key`` (not to biomoe's subclass)."""
        bases = self.package.library_bases(key)
        if not bases:
            return False
        known = [library_private_names(b) for b in bases]
        if any(k is None for k in known):  # a base we cannot import here: what biomoe does not define
            return not own_definitions or name not in self.package.biomoe_defined(key)
        return any(name in k for k in known)

    # --- attribute access
    def visit_Attribute(self, node: ast.Attribute) -> None:
        if is_private(node.attr):
            self._check(node, node.attr, node.value)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr", "setattr", "delattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str) and is_private(node.args[1].value):
            self._check(node, node.args[1].value, node.args[0])
        self.generic_visit(node)

    def _check(self, node: ast.AST, name: str, receiver: ast.expr) -> None:
        root = _chain_root(receiver)
        library_path = dotted_name(receiver, self.bound)
        if library_path is not None:
            self.report(node, f"{library_path}.{name}")
        elif isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
            key = self.classes[-1] if self.classes else None
            if key and self._library_owns(key, name, own_definitions=False) and \
                    not _listed(name, self.package.library_bases(key), self.overridden):
                self.report(node, f"super().{name} (private method of {', '.join(self.package.library_bases(key))})")
        elif isinstance(receiver, ast.Name) and receiver.id in self.self_names:
            key = self.self_names[receiver.id]
            if self._library_owns(key, name) and not _listed(name, self.package.library_bases(key), self.overridden):
                self.report(node, f"{receiver.id}.{name} (owned by {', '.join(self.package.library_bases(key))})")
        elif isinstance(root, ast.Name) and root is receiver and root.id in self.other_modules:
            return  # a stdlib or biomoe module's private name: not a library reach-in
        elif name not in self.package.own_names:
            # The object's type is unknown here: a private name biomoe never defines is another
            # library's (a name biomoe defines itself is taken to be biomoe's).
            self.report(node, f"{ast.unparse(receiver)}.{name} (a private name biomoe does not define)")


def _non_library_imports(tree: ast.AST) -> set[str]:
    """Every name an import binds in the module (libraries' names are removed by the caller)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    return names


def private_uses(sources: Mapping[str, str], package: Package | None = None) -> list[str]:
    """Private library names used outside ``biomoe/compat/`` (``path:line: what``)."""
    package = package or Package(sources)
    overridden = overridden_methods(sources)
    found = []
    for path in sources:
        if path.startswith(COMPAT_DIR):
            continue
        visitor = _PrivateUses(package, path, overridden)
        visitor.visit(package.trees[path])
        found += visitor.found
    return list(dict.fromkeys(found))


def stale_overrides(sources: Mapping[str, str], package: Package | None = None) -> list[str]:
    """OVERRIDDEN entries no biomoe class overrides: the table lists exactly what is overridden."""
    package = package or Package(sources)
    stale = []
    for listed, methods in sorted(overridden_methods(sources).items()):
        parent = import_object(listed)
        for method in sorted(methods):
            if not any(method in _class_body_names(info.node) and _derives(package.library_bases(key), listed, parent)
                       for key, info in package.classes.items()):
                stale.append(f"{listed}.{method}")
    return stale


def _derives(bases: list[str], listed: str, parent: object) -> bool:
    for base in bases:
        cls = import_object(base)
        if base == listed or (isinstance(cls, type) and isinstance(parent, type) and issubclass(cls, parent)):
            return True
    return False


# ------------------------------------------------------------------------ the benchmark
def benchmark_imports(sources: Mapping[str, str]) -> list[str]:
    """Imports of the benchmark (the top-level ``bench`` package beside ``biomoe/``): it lives in
    the repository only, so an installed biomoe that imported it would fail outside a clone."""
    found = []
    for path, text in sources.items():
        module = module_name(path)
        tree = ast.parse(text, filename=path)
        for target, line in imported_modules(tree, module, path.endswith("__init__.py"), set()):
            if target.split(".")[0] == "bench":
                found.append(f"{path}:{line}: imports {target}")
    return found


# -------------------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    return package_sources()


@pytest.fixture(scope="module")
def edges(sources) -> list[Edge]:
    return import_edges(sources)


@pytest.fixture(scope="module")
def package(sources) -> Package:
    return Package(sources)


def test_no_package_level_import_cycles(edges):
    cycles = cycle_report(edges)
    assert not cycles, "package-level import cycles (each import that closes one):\n" + "\n".join(cycles)


def test_packages_import_only_their_layer_and_below(edges):
    problems = layer_report(edges)
    assert not problems, "imports against the layer order (LAYERS, top to bottom):\n" + "\n".join(problems)


def test_training_subpackages_import_only_their_layer_and_below(sources):
    edges = subpackage_edges(sources, f"{PACKAGE}.training")
    assert edges, "no import between biomoe.training's subpackages found: is the reader wrong?"
    cycles = cycle_report(edges)
    assert not cycles, "import cycles between biomoe.training's subpackages:\n" + "\n".join(cycles)
    problems = layer_report(edges, TRAINING_LAYERS, "TRAINING_LAYERS")
    assert not problems, ("imports against the layer order of biomoe.training (TRAINING_LAYERS, top to "
                          "bottom):\n" + "\n".join(problems))


def test_private_library_internals_only_in_compat(sources, package):
    found = private_uses(sources, package)
    assert not found, ("private names of torch/lightning/transformer_engine/transformers/jsonargparse outside "
                       "biomoe/compat (move each into the compat module of that library):\n" + "\n".join(found))


def test_overridden_lists_exactly_the_overridden_methods(sources, package):
    assert overridden_methods(sources), "no compat module has an OVERRIDDEN table"
    assert stale_overrides(sources, package) == [], "listed in a compat OVERRIDDEN table but overridden nowhere"


def test_the_library_never_imports_the_benchmark(sources):
    assert benchmark_imports(sources) == [], "biomoe imports bench/, which is not installed with it"


# --------------------------------------------------------------- the checks can fail at all
def test_a_benchmark_import_is_reported():
    fake = {"biomoe/cli/x.py": "def f():\n    from bench.shapes import SHAPES\n",
            "biomoe/model/m.py": "import benchmark\n"}
    assert benchmark_imports(fake) == ["biomoe/cli/x.py:2: imports bench.shapes"]


def test_a_two_module_cycle_is_reported_with_its_files():
    fake = {"biomoe/__init__.py": "", "biomoe/a/__init__.py": "", "biomoe/b/__init__.py": "",
            "biomoe/a/x.py": "from biomoe.b.y import f\n",
            "biomoe/b/y.py": "def f():\n    import importlib\n    return importlib.import_module('biomoe.a.x')\n"}
    report = cycle_report(import_edges(fake))
    assert len(report) == 1
    assert "biomoe.a -> biomoe.b: biomoe/a/x.py:1" in report[0]
    assert "biomoe.b -> biomoe.a: biomoe/b/y.py:3" in report[0]


def test_a_module_named_in_a_table_is_an_import():
    fake = {"biomoe/model/m.py": "def load():\n    for name in ('biomoe.backends.te',):\n        __import__(name)\n",
            "biomoe/backends/te.py": "", "biomoe/data/d.py": "GROUP = 'biomoe.readers'\n"}
    assert layer_report(import_edges(fake)) == [
        "biomoe/model/m.py:2: biomoe.model (layer 9) imports biomoe.backends (layer 7, above it)"]


def test_a_function_local_import_upwards_breaks_the_layers():
    fake = {"biomoe/model/m.py": "def f():\n    from biomoe.training import t\n",
            "biomoe/training/t.py": "import biomoe.model.m\n"}
    problems = layer_report(import_edges(fake))
    assert problems == ["biomoe/model/m.py:2: biomoe.model (layer 9) imports biomoe.training (layer 2, above it)"]


def test_a_training_subpackage_importing_upwards_is_reported():
    fake = {"biomoe/training/__init__.py": "", "biomoe/training/old_paths.py": "",
            "biomoe/training/step/__init__.py": "",
            "biomoe/training/step/m.py": "from biomoe.training import old_paths\n",  # not a subpackage: no edge
            "biomoe/training/reports/__init__.py": "",
            "biomoe/training/reports/r.py": "def f():\n    from biomoe.training.step import m\n"}
    edges = subpackage_edges(fake, "biomoe.training")
    assert layer_report(edges, TRAINING_LAYERS, "TRAINING_LAYERS") == [
        "biomoe/training/reports/r.py:2: biomoe.training.reports (layer 1) imports biomoe.training.step "
        "(layer 0, above it)"]


def test_a_package_missing_from_the_layers_is_reported():
    fake = {"biomoe/newpkg/a.py": "from biomoe.model import m\n", "biomoe/model/m.py": ""}
    assert layer_report(import_edges(fake)) == ["biomoe.newpkg is in no layer of LAYERS"]


@pytest.mark.parametrize("code, found", [
    ("import torch\ntorch._grouped_mm(1)\n", "torch._grouped_mm"),
    ("from torch import _foreach_norm\n", "from torch import _foreach_norm"),
    ("from torch.distributed.algorithms._checkpoint import x\n", "private module"),
    ("import torch.nn.functional as F\nF._canonical_mask\n", "torch.nn.functional._canonical_mask"),
    ("def f(block):\n    return getattr(block, '_checkpoint_wrapped_module', block)\n", "_checkpoint_wrapped_module"),
    ("import lightning as L\nclass M(L.LightningModule):\n    def f(self):\n        return self._trainer\n",
     "self._trainer"),
    ("import lightning as L\nclass M(L.LightningModule):\n    def _on_before_batch_transfer(self):\n        pass\n",
     "not listed in compat OVERRIDDEN"),
])
def test_a_private_library_use_is_reported(code, found):
    uses = private_uses({"biomoe/x.py": code, "biomoe/compat/lightning.py": "OVERRIDDEN = {}\n"})
    assert len(uses) == 1 and found in uses[0], uses


@pytest.mark.parametrize("code", [
    "import torch\ntorch.__version__\n",
    "class A:\n    def __init__(self):\n        self._n = 1\n    def f(self):\n        return self._n\n",
    "def g(a):\n    return a._n\nclass A:\n    _n = 1\n",
    "import sys\nsys._getframe(0)\n",
    "import lightning as L\nclass M(L.LightningModule):\n    def __init__(self):\n        self._mine = 1\n",
    "from lightning.pytorch.cli import LightningCLI\nclass C(LightningCLI):\n"
    "    def _parse_ckpt_path(self):\n        return super()._parse_ckpt_path()\n",
])
def test_allowed_uses_are_not_reported(code):
    compat = 'OVERRIDDEN = {"lightning.pytorch.cli.LightningCLI": ("_parse_ckpt_path",)}\n'
    assert private_uses({"biomoe/x.py": code, "biomoe/compat/lightning.py": compat}) == []


def test_a_stale_overridden_entry_is_reported():
    compat = 'OVERRIDDEN = {"lightning.pytorch.cli.LightningCLI": ("_parse_ckpt_path", "_add_subcommands")}\n'
    code = ("from lightning.pytorch.cli import LightningCLI\nclass C(LightningCLI):\n"
            "    def _parse_ckpt_path(self):\n        pass\n")
    assert stale_overrides({"biomoe/x.py": code, "biomoe/compat/lightning.py": compat}) == [
        "lightning.pytorch.cli.LightningCLI._add_subcommands"]


def test_compat_itself_may_use_internals():
    assert private_uses({"biomoe/compat/torch.py": "import torch\ntorch._grouped_mm\n"}) == []
