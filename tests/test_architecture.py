"""The shape of the house: no import circle, and leaves that import nothing of ours.

Every import of a dptensor module by another counts, at module level or inside a function: an
import hidden in a function still ties the two modules together, and is how circles used to be
held (``_validation -> accounting -> accountant -> _validation``, ``_validation -> _base``).
"""
from __future__ import annotations

import ast
import pathlib

import dptensor

ROOT = pathlib.Path(dptensor.__file__).parent

#: Modules every other may import, which import nothing of dptensor's.
LEAVES = ("dptensor.exceptions", "dptensor._guards")


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: pathlib.Path, modules) -> set[str]:
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]
                            if node.level else [node.module or ""]).rstrip(".")
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        out.update(t for t in targets if t in modules and t != name)
    return out


def _graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _circles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(root):
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on:
                low[node] = min(low[node], index[child])

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def test_no_module_imports_itself_through_others():
    assert _circles(_graph()) == []


def test_the_finder_sees_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_leaves_import_nothing_of_dptensor():
    graph = _graph()
    for leaf in LEAVES:
        assert graph[leaf] == set(), (leaf, graph[leaf])


#: The mechanisms' releases: each call names its statistic's floating-point rounding.
RELEASES = ("gaussian_release", "laplace_release", "symmetric_gaussian_release",
            "joint_gaussian_release")


def _unrounded_releases() -> list[str]:
    """Calls of a release outside the mechanisms that do not say ``rounding=``: a float sum
    released without its allowance (``rounding=None`` says, in the code, that the value is exact)."""
    found = []
    for name, path in sorted(_modules().items()):
        if name.startswith("dptensor.mechanisms"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in RELEASES and "rounding" not in {k.arg for k in node.keywords}:
                found.append(f"{name}:{node.lineno}")
    return found


def test_every_release_names_its_rounding():
    """Exact statistics say ``rounding=None``; float sums a :class:`~dptensor.mechanisms.Rounding`
    (item 6 of the floating-point review: one function bounds every float release site)."""
    assert _unrounded_releases() == []


#: Modules that hold estimators: thin, and none takes a function or a constant from another.
ESTIMATORS = ("dptensor.pca", "dptensor.adaptive_pca", "dptensor.tensor_decomposition",
              "dptensor.streaming_tensor_power", "dptensor.completion",
              "dptensor.latent.gaussian_mixture", "dptensor.latent.lda",
              "dptensor.model_selection._search")


def test_no_estimator_module_takes_anything_from_another():
    graph = _graph()
    for name in ESTIMATORS:
        assert not graph[name] & set(ESTIMATORS), (name, graph[name] & set(ESTIMATORS))


def test_algorithms_are_arrays_in_arrays_out():
    """The algorithms layer knows no estimator, no accountant and no scikit-learn."""
    modules = _modules()
    algorithms = [n for n in modules if n.startswith("dptensor.algorithms")]
    assert algorithms, "dptensor.algorithms holds the algorithms"
    graph = _graph()
    forbidden = set(ESTIMATORS) | {"dptensor._base", "dptensor.accounting.accountant",
                                   "dptensor.accounting.ledger", "dptensor.latent._base"}
    for name in algorithms:
        assert not graph[name] & forbidden, (name, graph[name] & forbidden)
        tree = ast.parse(modules[name].read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not {m for m in imported if m.split(".")[0] == "sklearn"}, name


MAX_FILE_LINES, MAX_FUNCTION_LINES = 700, 80


def test_files_and_functions_stay_short():
    long_files, long_functions = [], []
    for name, path in sorted(_modules().items()):
        text = path.read_text()
        if text.count("\n") > MAX_FILE_LINES:
            long_files.append(name)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                    long_functions.append(f"{name}.{node.name}")
    assert long_files == [] and long_functions == []
