"""The layer order of docs/architecture.md holds: no module imports a part listed below its own, no import circles.

Every import in every module of kitae counts, function-level ones too (a lazy import is still a dependency);
grader types registered as "module:Class" strings are not imports (docs/architecture.md: lazy registration).
The checker itself is tested on small made-up packages, so a broken reader cannot pass by finding nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import kitae

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def layer_order(doc: Path = DOC) -> list[str]:
    """The parts in the order of the table in docs/architecture.md (rows "| 4 | `registry` | ... |")."""
    rows = re.findall(r"^\| *(\d+) *\| *`([\w.]+)` *\|", doc.read_text(encoding="utf-8"), flags=re.M)
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1)), "the table's rows are numbered 1, 2, ..."
    return [name for _, name in rows]


def module_names(package: Path) -> dict[str, Path]:
    """{dotted module name: file} for every .py file of `package` (a package's name for its __init__.py)."""
    out = {}
    for f in sorted(package.rglob("*.py")):
        parts = list(f.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def imports_of(module: str, file: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package that `module` imports anywhere in its file (function bodies too)."""
    package = module if file.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"), str(file))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1 packages
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            # "from a.b import c" imports the module a.b.c when there is one, else names from a.b
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:  # "import a.b.c" of a non-module attribute path: its module
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def part_of(module: str) -> str:
    """kitae.graders.spec -> graders; kitae.errors -> errors; kitae -> kitae (the root package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(graph: dict[str, set[str]], order: list[str], where: str = "docs/architecture.md's table"
                   ) -> list[str]:
    """Each import of a part listed later in `order` than the importing module's own part (or of a part not in
    `order`, which is `where`'s), as "importer -> imported (why)"."""
    rank = {name: i for i, name in enumerate(order)}
    bad = []
    for module, targets in sorted(graph.items()):
        own = part_of(module)
        for target in sorted(targets):
            other = part_of(target)
            if own == other:
                continue
            if own not in rank or other not in rank:
                missing = own if own not in rank else other
                bad.append(f"{module} -> {target} ('{missing}' is not in {where})")
            elif rank[other] >= rank[own]:
                bad.append(f"{module} -> {target} ('{other}' is not listed above '{own}')")
    return bad


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every set of modules that import each other in a circle (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def import_graph(package: Path) -> dict[str, set[str]]:
    modules = module_names(package)
    return {m: imports_of(m, f, modules) for m, f in modules.items()}


# ---- kitae itself ------------------------------------------------------------------------------------
GRAPH = import_graph(Path(kitae.__file__).parent)


def test_no_module_imports_a_part_listed_below_its_own():
    assert upward_imports(GRAPH, layer_order()) == []


def test_no_modules_import_each_other_in_a_circle():
    assert import_cycles(GRAPH) == []


def test_every_part_is_in_the_table_and_in_the_package_map():
    """docs/architecture.md's table and kitae/__init__.py's map name every folder and module of the package."""
    parts = {part_of(m) for m in GRAPH}
    assert parts == set(layer_order())
    folders = {p.name for p in Path(kitae.__file__).parent.iterdir() if p.is_dir() and not p.name.startswith("_")}
    assert {f"kitae/{name}" for name in folders} <= set(re.findall(r"kitae/\w+", kitae.__doc__))


# ---- the stage order inside kitae/trainer/ -----------------------------------------------------------
def trainer_order(doc: Path = DOC) -> list[str]:
    """The modules of kitae/trainer/ in the order of docs/architecture.md's paragraph "**The order inside the
    trainer.**", written there as a chain: `processes` → `sharded` → ..."""
    text = doc.read_text(encoding="utf-8")
    paragraph = re.search(r"\*\*The order inside the trainer\.\*\*(.*?)(?:\n\n|\Z)", text, flags=re.S)
    assert paragraph, "docs/architecture.md has a paragraph that starts '**The order inside the trainer.**'"
    chain = re.search(r"`\w+`(?:\s*→\s*`\w+`)+", paragraph.group(1))
    assert chain, "the paragraph names the modules as a chain `a` → `b` → ..."
    return re.findall(r"`(\w+)`", chain.group(0))


def imports_inside(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """`graph` cut to the modules of `package` (its __init__ left out) and their imports of each other, each
    named as if `package` were the root, so that part_of gives the module: kitae.trainer.collect ->
    trainer.collect."""
    parent = package.rpartition(".")[0] + "." if "." in package else ""
    inner = {m for m in graph if m.startswith(package + ".")}
    return {m.removeprefix(parent): {t.removeprefix(parent) for t in graph[m] if t in inner} for m in inner}


TRAINER = imports_inside(GRAPH, "kitae.trainer")
TRAINER_ORDER = "docs/architecture.md's order inside the trainer"


def test_no_trainer_module_imports_one_listed_after_it():
    """The stages of a training step depend forward only: a helper two stages share lives below both."""
    assert upward_imports(TRAINER, trainer_order(), where=TRAINER_ORDER) == []


def test_the_trainer_order_names_every_module_of_the_trainer_once():
    order = trainer_order()
    assert len(order) == len(set(order)), order
    assert set(order) == {part_of(m) for m in TRAINER}


# ---- the checker, on made-up packages -----------------------------------------------------------------
def make_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_the_checker_finds_an_upward_import_also_inside_a_function(tmp_path):
    pkg = make_package(tmp_path, {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from pkg.high import b  # lazy, still a dependency\n",
        "high/__init__.py": "",
        "high/b.py": "from pkg.low.a import f\n",
    })
    graph = import_graph(pkg)
    assert graph["pkg.low.a"] == {"pkg.high.b"} and graph["pkg.high.b"] == {"pkg.low.a"}
    assert upward_imports(graph, ["low", "high"]) == ["pkg.low.a -> pkg.high.b ('high' is not listed above 'low')"]
    assert import_cycles(graph) == [["pkg.high.b", "pkg.low.a"]]
    assert upward_imports(graph, ["low"])[0].endswith("('high' is not in docs/architecture.md's table)")


def test_the_checker_reads_relative_and_package_imports_and_ignores_lazy_registry_strings(tmp_path):
    pkg = make_package(tmp_path, {
        "__init__.py": "",
        "low/__init__.py": "from .a import f\n",
        "low/a.py": "REGISTRY = {'b': 'pkg.high.b:B'}\nf = 1\n",
        "high/__init__.py": "",
        "high/b.py": "from ..low import a\nimport pkg.low\nfrom pkg.low.a import f\n",
    })
    graph = import_graph(pkg)
    assert graph["pkg.low"] == {"pkg.low.a"}
    assert graph["pkg.low.a"] == set()
    assert graph["pkg.high.b"] == {"pkg.low.a", "pkg.low"}
    assert upward_imports(graph, ["low", "high"]) == [] and import_cycles(graph) == []


def test_the_checker_finds_a_module_inside_a_part_that_imports_one_listed_after_it(tmp_path):
    pkg = make_package(tmp_path, {
        "__init__.py": "",
        "other.py": "",
        "steps/__init__.py": "",
        "steps/first.py": "import pkg.other\n\ndef f():\n    from pkg.steps.second import g  # a later stage, lazily\n",
        "steps/second.py": "from .first import f\n",
    })
    inner = imports_inside(import_graph(pkg), "pkg.steps")
    assert inner == {"steps.first": {"steps.second"}, "steps.second": {"steps.first"}}
    assert upward_imports(inner, ["first", "second"], where="the order") == [
        "steps.first -> steps.second ('second' is not listed above 'first')"]
    assert upward_imports(inner, ["first"], where="the order") == [
        "steps.first -> steps.second ('second' is not in the order)",
        "steps.second -> steps.first ('second' is not in the order)"]


@pytest.mark.parametrize("text, expected", [
    ("**The order inside the trainer.** In\n`a` → `b`\n→ `c`, as `x` says.\n\nnot `d` → `e`", ["a", "b", "c"]),
    ("intro `z` → `y`\n\n**The order inside the trainer.** `a` →\n`b`", ["a", "b"]),
])
def test_the_trainer_order_reader(tmp_path, text, expected):
    (tmp_path / "a.md").write_text(text)
    assert trainer_order(tmp_path / "a.md") == expected


@pytest.mark.parametrize("text, expected", [
    ("| 1 | `errors` | x |\n| 2 | `data` | y |\n", ["errors", "data"]),
    ("| 1 | `kitae` | the root |\n| 2 | `cli` | y |\n", ["kitae", "cli"]),
    ("| # | part | what |\n|---|---|---|\n| 1 | `a` | x |\n", ["a"]),
])
def test_the_table_reader(tmp_path, text, expected):
    (tmp_path / "a.md").write_text(text)
    assert layer_order(tmp_path / "a.md") == expected
