"""The shape of the code, checked: imports run one way, and files and functions stay small
enough to read at once (docs/architecture.md says what lives where)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import DATABASE_DEPENDENT

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("evalhub", "jobs", "traces", "frontend")
# Packages of their own distribution beside the server, each in its folder: the `evalhub`
# command (client/, installed alone) is a client of the REST API and imports nothing of the
# server, nor does the server import it.
CLIENT_PACKAGES = {"evalhub_client": ROOT / "client" / "evalhub_client"}
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60

# The layers, bottom first, each a list of module prefixes: a module belongs to the layer of
# its longest matching prefix, and imports only from its own layer and those below.
LAYERS = [
    # Settings, the Celery app, heartbeats, encryption, providers: they know no app.
    ["evalhub"],
    # Jobs and samples: models, lifecycle, leases, events, figures, the verifier's rules.
    ["jobs"],
    # LLM calls (recording, pricing, wire formats), results and figures of calls, the zip,
    # the interceptor: they build on jobs.
    ["traces"],
    # The top: the API, the worker, the dashboard, the entry points; they use everything.
    ["jobs.api", "jobs.worker", "jobs.tasks", "jobs.apps", "jobs.management", "frontend",
     "evalhub.urls", "evalhub.asgi", "evalhub.wsgi", "evalhub.runall", "evalhub.demo",
     "evalhub.health", "evalhub.metrics_endpoint", "evalhub.middleware", "evalhub.webserver",
     "evalhub.errors"],
]  # fmt: skip
# Function-level imports of project modules, each with its reason. Anything else is a cycle
# being dodged and fails the test.
LATE_IMPORTS_ALLOWED = {
    # A launcher: Django is set up inside main() after the environment is prepared.
    ("evalhub.runall", "django"),
    # prometheus_client reads PROMETHEUS_MULTIPROC_DIR as it is imported: after the settings.
    ("evalhub.runall", "evalhub.metrics"),
    # The MCP SDK takes most of a second to import: a worker pays it with its first MCP-Gym job.
    ("jobs.worker.environments.run", "jobs.worker.environments.mcp_gym"),
}


def project_modules() -> dict[str, Path]:
    modules = {}
    folders = {**{package: ROOT / package for package in PACKAGES}, **CLIENT_PACKAGES}
    for package, folder in folders.items():
        for path in folder.rglob("*.py"):
            parts = (package, *path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, bool]]:
    """(imported module name, imported inside a function?) for every import of the module."""

    def walk(node: ast.AST, in_function: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, in_function
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parent = module.split(".")[: len(module.split(".")) - child.level + is_package]
                    base = ".".join([*parent, base] if base else parent)
                for alias in child.names:
                    yield f"{base}.{alias.name}", in_function
                    yield base, in_function
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                continue  # annotations only: nothing is imported at run time
            else:
                yield from walk(child, nested)

    yield from walk(tree, False)


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def import_graph() -> tuple[dict[str, set[str]], list[tuple[str, str]]]:
    """Module -> project modules it imports (at any level), and the function-level imports."""
    modules = project_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    late = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for target, in_function in _imports(tree, name, path.name == "__init__.py"):
            if target in modules and target != name:
                graph[name].add(target)
                if in_function:
                    late.append((name, target))
            elif in_function and target.split(".")[0] == "django" and "django" not in modules:
                late.append((name, "django"))
    return graph, late


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_project_modules():
    graph, _ = import_graph()
    assert cycles(graph) == []


def test_no_function_level_import_dodges_a_cycle():
    _, late = import_graph()
    unexplained = sorted({pair for pair in late if pair not in LATE_IMPORTS_ALLOWED})
    assert unexplained == []


def is_client(module: str) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in CLIENT_PACKAGES)


def imports_where(keep) -> list[str]:
    """ "module -> target" for every import between project modules that `keep(module, target)`."""
    graph, _ = import_graph()
    return sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets if keep(m, t))


def test_the_client_and_the_server_import_nothing_of_each_other():
    assert imports_where(lambda module, target: is_client(module) != is_client(target)) == []
    assert any(is_client(module) for module in project_modules())  # the client is read


def layer_of(module: str) -> int:
    """The index in LAYERS of the module's longest matching prefix."""
    best, layer = -1, 0
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(f"{prefix}.")) and len(prefix) > best:
                best, layer = len(prefix), index
    return layer


def test_imports_run_down_the_layers():
    upward = imports_where(
        lambda module, target: (
            layer_of(target) > layer_of(module) and (module, target) not in LATE_IMPORTS_ALLOWED
        )
    )
    assert upward == []


def test_the_layer_rule_knows_each_package():
    assert layer_of("jobs.leases") == 1 and layer_of("jobs.worker.runner") == 3
    assert layer_of("traces.results.totals") == 2 and layer_of("frontend.views") == 3
    assert layer_of("evalhub.settings") == 0 and layer_of("evalhub.urls") == 3


def test_files_and_functions_stay_readable():
    too_long_files, too_long_functions = [], []
    for path in sorted(project_modules().values()):
        if "migrations" in path.parts:
            continue
        source = path.read_text()
        if source.count("\n") > MAX_FILE_LINES:
            too_long_files.append(f"{path.relative_to(ROOT)}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    too_long_functions.append(f"{where} {node.name}: {length} lines")
    assert too_long_files == [] and too_long_functions == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_postgresql_pass_names_modules_that_exist():
    # CI's second pass (`-m database`) selects by these paths: a renamed module must not drop out.
    missing = sorted(p for p in DATABASE_DEPENDENT if not (ROOT / p).is_file())
    assert missing == []
