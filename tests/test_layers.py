"""The package's import graph, read from the source (imports inside functions included): no cycles, no
import of a layer above, llama_cpp imported by the llama.cpp engine alone."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "localguide"


def modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = ("localguide",) + p.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def imports(name: str, path: Path, known) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its text (a submodule named in a
    ``from`` import counts as that submodule, else the module itself)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module
            subs = {f"{base}.{a.name}" for a in node.names} & known
            out.update(subs or ({base} & known))
    out.discard(name)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports(m, p, mods.keys()) for m, p in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions():
    g = graph()
    assert "localguide.regex.ast_dfa" in g["localguide.regex.lookahead"]  # (imported inside functions only)


def test_no_module_of_the_package_imports_itself_back():
    found = cycles(graph())
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


# The layers, top to bottom: a module imports from its own layer and those below it, never above.
LAYERS = [
    ("the package and its commands", ["localguide", "localguide.cli", "localguide.llama"]),
    ("batch jobs", ["localguide.jobs"]),
    ("the server", ["localguide.server"]),
    ("the llama.cpp engine", ["localguide.engines"]),
    ("conversations", ["localguide.chat"]),
    ("guide combinators and drafts", ["localguide.guides", "localguide.speculate"]),
    ("the constraint", ["localguide.constraint"]),
    ("JSON Schema", ["localguide.json_schema"]),
    ("grammars", ["localguide.grammar", "localguide.grammars"]),
    ("regexes", ["localguide.regex"]),
    ("indexes", ["localguide.index"]),
    ("automata", ["localguide.automaton"]),
    ("model files where users keep them", ["localguide.models"]),
    ("the vocabulary and the protocol", ["localguide.vocabulary", "localguide.vocabulary_kernels",
                                         "localguide.vocabulary_numpy", "localguide.protocol", "localguide.distance",
                                         "localguide.sampling", "localguide.errors"]),
    ("runtime services", ["localguide.runtime", "localguide._version"]),
]
# Reached from below on purpose, each for one reason:
UPWARD = {
    ("localguide.vocabulary", "localguide.engines.llamacpp.gguf"),  # Vocabulary.from_gguf: llama.cpp reads the file
}


def layer(module: str) -> int:
    best, found = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, found = len(p), i
    assert found is not None, f"{module} is in no layer: add it to LAYERS"
    return found


def test_no_module_imports_a_layer_above_its_own():
    up = [f"{a} -> {b}" for a, bs in graph().items() for b in sorted(bs)
          if layer(b) < layer(a) and (a, b) not in UPWARD]
    assert up == [], "imports of a layer above: " + "; ".join(up)


def test_only_the_engine_folder_imports_llama_cpp():
    found = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            if any(n == "llama_cpp" or n.startswith("llama_cpp.") for n in names):
                found.append(name)
    outside = sorted({n for n in found if not n.startswith("localguide.engines.llamacpp")})
    assert found and outside == [], f"llama_cpp imported outside localguide.engines.llamacpp: {outside}"
