"""The project's imports read from its source with ast (none is run): what the layering
tests (tests/test_layering.py, tests/eager/test_import_layers.py) check."""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _type_checking(node) -> bool:
    """`if TYPE_CHECKING:` (its imports are for annotations: they never run)."""
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and \
        node.test.id == "TYPE_CHECKING"


def imports(path: pathlib.Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function?) for each import statement in `path`
    that runs (those under `if TYPE_CHECKING:` do not); `from a import b` names module
    a.b where there is one, else a."""
    importer = module_name(path)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    found = []

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                continue
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parent = package.split(".")[:len(package.split(".")) - child.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                for a in child.names:
                    sub = f"{base}.{a.name}"
                    found.append((sub if _is_module(sub) else base, child.lineno, in_function))
            visit(child, in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
    visit(ast.parse(path.read_text()), False)
    return found
