"""docs/MISSING.md's sections read from PyTorch's signatures rather than its names: the
methods torch.nn.Module and its subclasses have that kiln's lack, torch.utils' submodules
kiln has not, and the keyword arguments PyTorch accepts that kiln refuses.

What PyTorch has is written to eager/_torch_signatures.py by `python -m eager._missing`
(with PyTorch installed), so the doc is made again without PyTorch; what kiln has is read
from kiln's code at that time. The keyword arguments of a callable are the parameters it
takes by name that have a default value or are keyword-only: a required positional
argument (`input`, `self`, `other`) is given by position, and its name differs between
PyTorch's docs and kiln's schemas without any call telling them apart.
"""
from __future__ import annotations

import importlib
import inspect
import re

import eager.nn
from eager import _torch_signatures as snapshot  # (reloaded once written again)
from eager._missing import (NAMESPACES, ROOT, _imported_for_itself, _torch_names,
                            kiln_counterpart)
from eager.dispatcher import OpHandle

KEYWORD_NAMESPACES = {  # PyTorch's namespace -> which of its callables are compared
    "torch": "functions", "torch.Tensor": "functions", "torch.nn.functional": "functions",
    "torch.nn.init": "functions", "torch.nn": "torch.nn.Module",
    "torch.optim": "torch.optim.Optimizer",
    "torch.optim.lr_scheduler": "torch.optim.lr_scheduler.LRScheduler"}
PRIVATE_UTILS = ("_pytree",)  # private torch.utils submodules libraries import all the same
ACCEPTS_ANY = "**"  # kiln's callable takes **kwargs: every keyword is accepted


# what kiln has ------------------------------------------------------------------------
def _kiln_has(holder, name: str):
    """`holder.name` where kiln has it, else None (a stand-in for a lacking name is none)."""
    try:
        value = getattr(holder, name)
    except AttributeError:
        return None
    return None if getattr(value, "not_supported_yet", False) else value


def kiln_keywords(value) -> frozenset[str] | None:
    """The names kiln's callable takes as keywords (ACCEPTS_ANY among them where it takes
    **kwargs), or None where they cannot be read. An op's are its schema's arguments, and
    `out` where the op takes out= for itself (eager/out_argument.py); a function's are its
    parameters', and those of the wrappers around it (functools.wraps)."""
    handle = value if isinstance(value, OpHandle) else getattr(value, "handle", None)
    if isinstance(handle, OpHandle):
        names = {a.name for a in handle.schema.arguments}
        return frozenset(names | {"out"} if handle.writes_out else names)
    names = set()
    while True:  # a wrapper's own keywords (out=) count, its **kwargs go to what it wraps
        try:
            parameters = inspect.signature(value, follow_wrapped=False).parameters.values()
        except (TypeError, ValueError):
            return None
        names |= {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD,
                                                            p.KEYWORD_ONLY)}
        wrapped = getattr(value, "__wrapped__", None)
        if wrapped is None or "__signature__" in getattr(value, "__dict__", {}):
            break
        value = wrapped
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        names.add(ACCEPTS_ANY)
    return frozenset(names)


def refused_keywords() -> dict[str, dict]:
    """Per namespace, over the callables both have: 'refused', {name: the keywords PyTorch
    takes and kiln refuses} (empty tuples included); 'any', those kiln's takes **kwargs
    for (not compared: what it does with them is not read); 'undetermined', those whose
    keywords either side cannot say."""
    found = {}
    for namespace, pytorch in snapshot.KEYWORDS.items():
        holder, refused, any_keyword, undetermined = kiln_counterpart(namespace), {}, [], []
        for name, keywords in pytorch.items():
            value = _kiln_has(holder, name)
            if value is None:
                continue
            kiln = kiln_keywords(value)
            if keywords is None or kiln is None:
                undetermined.append(name)
            elif ACCEPTS_ANY in kiln:
                any_keyword.append(name)
            else:
                refused[name] = tuple(k for k in keywords.split() if k not in kiln)
        found[namespace] = {"refused": refused, "any": any_keyword,
                            "undetermined": undetermined}
    return found


def lacking_module_methods() -> dict[str, tuple[list[str], int]]:
    """Per torch.nn class kiln has (Module first): (the public methods and attributes
    PyTorch's class adds over Module that kiln's lacks, how many it adds)."""
    found = {}
    for name, methods in snapshot.MODULE_METHODS.items():
        kiln = _kiln_has(eager.nn, name)
        if kiln is not None:
            methods = methods.split()
            found[name] = (sorted(m for m in methods if _kiln_has(kiln, m) is None),
                           len(methods))
    return found


def utils_submodules() -> dict[str, list[str] | None]:
    """Per public torch.utils submodule: None where kiln has no module for it, else the
    public names PyTorch's has and kiln's lacks."""
    found = {}
    for name, names in snapshot.UTILS.items():
        if importlib.util.find_spec(f"eager.utils.{name}") is None:
            found[name] = None
        else:
            module = importlib.import_module(f"eager.utils.{name}")
            found[name] = sorted(n for n in (names or "").split() if _kiln_has(module, n) is None)
    return found


# the doc's sections ---------------------------------------------------------------------
def _code(names) -> str:
    names = list(names)
    return ", ".join(f"`{n}`" for n in names) if names else "(none)"


def markdown_sections() -> list[str]:
    lines = []
    methods = lacking_module_methods()
    lacking, total = methods.pop("Module")
    lines += [f"## torch.nn.Module's methods ({len(lacking)} of {total} missing)", "",
              "PyTorch's public methods and class attributes of `torch.nn.Module` that "
              "kiln's `nn.Module` lacks.", "", _code(lacking), ""]
    adding = {name: found for name, found in methods.items() if found[1]}
    count = sum(len(lacking) for lacking, _ in adding.values())
    lines += [f"## Methods torch.nn's modules add over Module ({count} of "
              f"{sum(total for _, total in adding.values())} missing)", "",
              "Per torch.nn class kiln has that adds public methods over `Module` in "
              "PyTorch, those kiln's class lacks.", ""]
    lines += [f"- `{name}` ({len(lacking)} of {total} missing): {_code(lacking)}"
              for name, (lacking, total) in adding.items() if lacking]
    complete = (name for name, (lacking, _) in adding.items() if not lacking)
    lines += ["", f"None missing: {_code(complete)}", ""]
    submodules = utils_submodules()
    absent = sorted(name for name, found in submodules.items() if found is None)
    lines += [f"## torch.utils submodules ({len(absent)} of {len(submodules)} missing)", "",
              "torch.utils' public submodules (and `_pytree`) kiln has no module for "
              "(`import torch.utils.X` through the alias fails):", "", _code(absent), "",
              "Those kiln has, with PyTorch's public names kiln's lacks:", ""]
    for name, found in submodules.items():
        if found is None:
            continue
        if f"torch.utils.{name}" in NAMESPACES:
            lines.append(f"- `torch.utils.{name}`: see its section above")
        elif snapshot.UTILS[name] is None:
            lines.append(f"- `torch.utils.{name}`: (PyTorch's could not be imported)")
        else:
            lines.append(f"- `torch.utils.{name}` ({len(found)} of "
                         f"{len(snapshot.UTILS[name].split())} missing): {_code(found)}")
    return lines + [""] + _keyword_lines()


def _keyword_lines() -> list[str]:
    lines = ["## Keyword arguments kiln refuses", "",
             "For each callable PyTorch and kiln both have, the keyword arguments PyTorch "
             "takes that kiln's refuses. A keyword argument is a parameter with a default "
             "value or a keyword-only one (required positional parameters are left out: "
             "their names differ, `input` and `self`, without any call telling; so are "
             "PyTorch's private ones, `_stacklevel`). "
             "PyTorch's are read from `inspect.signature` where it has one without "
             "`**kwargs`, else from the signature lines its docstring starts with (every "
             "overload's, e.g. `add(input, other, *, alpha=1, out=None) -> Tensor`), "
             "else, for a builtin with no docstring signature, from its ATen op's schemas "
             "(leaving out `out`, which not every such builtin takes); "
             "kiln's from its op's schema (ir/ops.py, plus `out`, which every op takes) "
             "or `inspect.signature` (a wrapper's own keywords included). A kiln callable "
             "taking `**kwargs` is not compared (what it does with them is not read), nor "
             "one whose keywords either side cannot say (undetermined: PyTorch's without "
             "a docstring signature, or taking `*args, **kwargs`). Module and optimizer "
             "classes are compared by their constructors.", ""]
    for namespace, found in refused_keywords().items():
        refused = {name: kws for name, kws in found["refused"].items() if kws}
        missing = sum(map(len, refused.values()))
        pytorch = snapshot.KEYWORDS[namespace]
        total = sum(len(pytorch[name].split()) for name in found["refused"])
        lines += [f"### {namespace} ({missing} of {total} keyword arguments missing, in "
                  f"{len(refused)} of {len(found['refused'])} callables compared; "
                  f"{len(found['any']) + len(found['undetermined'])} more both have are "
                  f"not compared)", ""]
        lines += [f"- `{name}`: {_code(kws)}" for name, kws in refused.items()]
        if found["any"]:
            lines += ["", f"kiln's takes `**kwargs`: {_code(found['any'])}"]
        if found["undetermined"]:
            lines += ["", f"Undetermined: {_code(found['undetermined'])}"]
        lines.append("")
    return lines


# what PyTorch has (read with PyTorch installed) -----------------------------------------
_SIGNATURE_LINE = r"^\s*(?:\.\. function:: )?(?:torch\.)?(?:Tensor\.)?{name}\((.*?)\)\s*(?:->.*)?$"


def _split_parameters(text: str) -> list[str]:
    """`text` split at its commas outside brackets and quotes."""
    pieces, depth, quote, start = [], 0, None, 0
    for i, c in enumerate(text):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            pieces.append(text[start:i])
            start = i + 1
    return pieces + [text[start:]]


def _doc_keywords(text: str) -> set[str] | None:
    """The keyword arguments of one docstring signature line's parameters (None where a
    parameter is not of a form read here: `name`, `name=default`, `*`, `*name`, `**name`,
    each name optionally annotated; reST's escaped star `\\*` is a star)."""
    keywords, keyword_only = set(), False
    for piece in (p.replace("\\", "").strip() for p in _split_parameters(text)):
        if not piece or piece.startswith("**"):
            continue
        if piece == "*" or piece.startswith("*"):
            keyword_only = True
            continue
        name, has_default, _ = piece.partition("=")
        name = name.partition(":")[0].strip()
        if not name.isidentifier():
            return None
        if has_default or keyword_only:
            keywords.add(name)
    return keywords


def pytorch_keywords(name: str, value) -> set[str] | None:
    """The keyword arguments PyTorch's callable takes, or None where it cannot be said:
    from its signature, else its docstring's signature lines (later overloads are reST's
    `.. function:: sum(input, dim, ...)` lines), else, for a builtin with neither, its
    ATen op's schemas."""
    try:
        parameters = inspect.signature(value).parameters.values()
    except (TypeError, ValueError):
        parameters = None
    if parameters is not None and all(p.kind is not p.VAR_KEYWORD for p in parameters):
        return {p.name for p in parameters if p.kind is p.KEYWORD_ONLY or
                p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty}
    doc = inspect.getdoc(value) if inspect.isclass(value) else getattr(value, "__doc__", None)
    lines = re.findall(_SIGNATURE_LINE.format(name=re.escape(name)), doc or "", re.MULTILINE)
    overloads = [k for k in map(_doc_keywords, lines) if k is not None]
    if overloads:
        return set().union(*overloads)
    builtin = inspect.isbuiltin(value) or inspect.ismethoddescriptor(value)
    return _schema_keywords(name) if builtin else None


def _schema_keywords(name: str) -> set[str] | None:
    """The keyword arguments of ATen's op `name` over its overloads, or None where ATen has
    no op of that name. Not `out`: an overload's outputs are not always given to Python
    (torch.relu refuses out=, though ATen has relu.out)."""
    import torch
    schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
    return {a.name for schema in schemas for a in schema.arguments if not a.is_out and
            (a.kwarg_only or a.has_default_value())} if schemas else None


def _pytorch_callables(namespace: str, names) -> dict:
    """{name: PyTorch's callable} for `namespace`'s names KEYWORD_NAMESPACES compares."""
    holder = importlib.import_module(namespace.partition(".Tensor")[0])
    holder = holder.Tensor if namespace == "torch.Tensor" else holder
    kind = KEYWORD_NAMESPACES[namespace]
    base = None if kind == "functions" else _dotted(kind)
    found = {}
    for name in sorted(names):
        value = getattr(holder, name, None)
        if base is None and callable(value) and not inspect.isclass(value) or \
                base is not None and inspect.isclass(value) and issubclass(value, base):
            found[name] = value
    return found


def _dotted(path: str):
    module, _, attribute = path.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def pytorch_signatures() -> dict:
    """What eager/_torch_signatures.py holds, read from the installed PyTorch."""
    names = _torch_names()
    return {"MODULE_METHODS": _pytorch_module_methods(names["torch.nn"]),
            "UTILS": _pytorch_utils(), "KEYWORDS": {
                namespace: {name: _keyword_text(pytorch_keywords(name, value)) for name, value
                            in _pytorch_callables(namespace, names[namespace]).items()}
                for namespace in KEYWORD_NAMESPACES}}


def _keyword_text(found: set[str] | None) -> str | None:
    """The snapshot's text for a callable's keyword arguments, not PyTorch's private ones."""
    return None if found is None else " ".join(sorted(k for k in found if k[0] != "_"))


def _pytorch_module_methods(nn_names) -> dict[str, str]:
    """Module's public names, and those each torch.nn module class adds over them."""
    import torch
    module = set(n for n in dir(torch.nn.Module) if not n.startswith("_"))
    methods = {"Module": " ".join(sorted(module))}
    for name in nn_names:
        value = getattr(torch.nn, name)
        if inspect.isclass(value) and issubclass(value, torch.nn.Module) and name != "Module":
            methods[name] = " ".join(sorted(
                n for n in dir(value) if not n.startswith("_") and n not in module))
    return methods


def _pytorch_utils() -> dict[str, str | None]:
    """torch.utils' public submodules (and PRIVATE_UTILS) with their public names; None
    for one PyTorch's install cannot import."""
    import pkgutil
    import torch.utils
    utils = {}
    for info in sorted(pkgutil.iter_modules(torch.utils.__path__), key=lambda m: m.name):
        if info.name.startswith("_") and info.name not in PRIVATE_UTILS:
            continue
        namespace = f"torch.utils.{info.name}"
        try:
            sub = importlib.import_module(namespace)
        except Exception:  # one needing a package not installed (tensorboard)
            utils[info.name] = None
            continue
        utils[info.name] = " ".join(sorted(
            n for n in dir(sub) if not n.startswith("_")
            and not _imported_for_itself(namespace, getattr(sub, n, None))))
    return utils


def write_snapshot() -> None:
    """Write eager/_torch_signatures.py from the installed PyTorch."""
    import torch
    tables = pytorch_signatures()
    text = [f'"""PyTorch {torch.__version__}\'s signatures as docs/MISSING.md reads them '
            f'(written by `python -m eager._missing`; see eager/_missing_signatures.py)."""',
            "# flake8: noqa", f"TORCH_VERSION = {torch.__version__!r}", ""]
    for table in ("MODULE_METHODS", "UTILS"):
        text += [f"{table} = {{"] + [f"    {k!r}: {v!r}," for k, v in
                                     tables[table].items()] + ["}", ""]
    text.append("KEYWORDS = {")
    for namespace, found in tables["KEYWORDS"].items():
        text += [f"    {namespace!r}: {{"] + [f"        {k!r}: {v!r}," for k, v in
                                               found.items()] + ["    },"]
    text += ["}", ""]
    (ROOT / "eager" / "_torch_signatures.py").write_text("\n".join(text))
    print(f"wrote eager/_torch_signatures.py ({len(tables['MODULE_METHODS'])} module classes, "
          f"{len(tables['UTILS'])} torch.utils submodules, "
          f"{sum(map(len, tables['KEYWORDS'].values()))} callables)")
