"""Operator schemas in PyTorch's text form, parsed into typed signatures.

    add(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
    max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)
    add_(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)

`Tensor(a)` marks an alias of input `a` (views), `Tensor(a!)` an input that the op
writes (in-place and out= arguments). Types end in `?` when None is allowed and in
`[]` / `[N]` for lists (`Tensor?[]`: a list whose items may be None).
"""
from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass, field

_NO_DEFAULT = object()


@dataclass(frozen=True)
class Type:
    base: str  # Tensor, Scalar, int, float, bool, str, ScalarType, Device, SymInt
    optional: bool = False
    is_list: bool = False
    alias: str | None = None  # "a" in Tensor(a) / Tensor(a!)
    mutable: bool = False
    list_size: int | None = None  # 2 in int[2]: a single int is accepted and repeated
    elem_optional: bool = False  # Tensor?[]: a list whose items may be None
    alias_after: str | None = None  # "*" in Tensor(a -> *): the outputs may alias it

    @property
    def is_tensor(self) -> bool:
        return self.base == "Tensor" and not self.is_list

    @property
    def is_tensor_list(self) -> bool:
        return self.base == "Tensor" and self.is_list

    def __str__(self) -> str:
        s = self.base
        if self.alias is not None:
            after = f" -> {self.alias_after}" if self.alias_after else ""
            s += f"({self.alias}{'!' if self.mutable else ''}{after})"
        if self.is_list:
            s += ("?" if self.elem_optional else "") + f"[{self.list_size or ''}]"
        return s + ("?" if self.optional else "")


@dataclass(frozen=True)
class Argument:
    name: str
    type: Type
    default: object = _NO_DEFAULT
    kwarg_only: bool = False

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT

    def __str__(self) -> str:
        s = f"{self.type} {self.name}"
        if self.has_default:
            s += "=" + _format_default(self.default)
        return s


@dataclass(frozen=True)
class FunctionSchema:
    name: str
    overload: str
    arguments: tuple[Argument, ...]
    returns: tuple[Argument, ...]
    tensor_args: tuple[tuple[int, str], ...] = field(default=(), compare=False)

    @property
    def qualified_name(self) -> str:
        return self.name + (f".{self.overload}" if self.overload else "")

    @property
    def is_mutable(self) -> bool:
        return any(a.type.mutable for a in self.arguments)

    @property
    def mutated_args(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.arguments if a.type.mutable)

    @property
    def is_view(self) -> bool:
        return any(r.type.alias is not None and not r.type.mutable for r in self.returns)

    def bind(self, args: tuple, kwargs: dict) -> dict:
        """Map a call's positional and keyword arguments to parameter names, defaults
        filled in; raise TypeError naming the op and the argument on a mismatch."""
        positional = [a for a in self.arguments if not a.kwarg_only]
        if len(args) > len(positional):
            raise TypeError(f"{self.name}() takes {len(positional)} positional arguments "
                            f"but {len(args)} were given")
        bound = {}
        for a, v in zip(positional, args):
            bound[a.name] = v
        names = {a.name for a in self.arguments}
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"{self.name}() got an unexpected keyword argument '{k}'")
            if k in bound:
                raise TypeError(f"{self.name}() got multiple values for argument '{k}'")
            bound[k] = v
        for a in self.arguments:
            if a.name not in bound:
                if not a.has_default:
                    raise TypeError(f"{self.name}() missing required argument '{a.name}'")
                bound[a.name] = a.default
        return bound

    def signature(self) -> inspect.Signature:
        """The Python signature calls bind to (`inspect.signature` of the op shows it)."""
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return inspect.Signature([
            inspect.Parameter(a.name, kinds[a.kwarg_only],
                              default=a.default if a.has_default else inspect.Parameter.empty)
            for a in self.arguments])

    def __str__(self) -> str:
        parts, star = [], False
        for a in self.arguments:
            if a.kwarg_only and not star:
                parts.append("*")
                star = True
            parts.append(str(a))
        if len(self.returns) == 1 and not self.returns[0].name:
            ret = str(self.returns[0].type)
        else:
            ret = "(" + ", ".join(f"{r.type} {r.name}".strip() for r in self.returns) + ")"
        return f"{self.qualified_name}({', '.join(parts)}) -> {ret}"


_TYPE_RE = re.compile(r"^(\w+)(?:\((\w+)(!?)(?:\s*->\s*(\*|\w+))?\))?"
                      r"(?:(\??)\[(\d*)\])?(\?)?$")


def _parse_type(text: str) -> Type:
    """A Type, one object per text (Types are immutable; ~300 are parsed at import, of
    ~40 texts)."""
    known = _TYPES.get(text)
    if known is None:
        known = _TYPES[text] = _new_type(text)
    return known


_TYPES: dict[str, Type] = {}


def _new_type(text: str) -> Type:
    m = _TYPE_RE.match(text.strip())
    if not m:
        raise ValueError(f"bad type in schema: {text!r}")
    base, alias, bang, after, elem_opt, size, opt = m.groups()
    return Type(base=base, optional=bool(opt), is_list=size is not None, alias=alias,
                mutable=bool(bang), list_size=int(size) if size else None,
                elem_optional=bool(elem_opt), alias_after=after)


def _parse_default(text: str):
    text = text.strip()
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError) as e:
        raise ValueError(f"bad default in schema: {text!r}") from e
    return tuple(value) if isinstance(value, list) else value


def _format_default(value) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets or parentheses."""
    if "(" not in text and "[" not in text:
        parts = [p.strip() for p in text.split(",")]
        return parts if parts[-1] else parts[:-1]  # as below: a blank last part is dropped
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return [p.strip() for p in parts]


def _parse_arg(text: str, kwarg_only: bool) -> Argument:
    decl, _, default = text.partition("=")
    type_text, _, name = decl.strip().rpartition(" ")
    if not type_text:
        raise ValueError(f"argument without a type in schema: {text!r}")
    arg_default = _parse_default(default) if default else _NO_DEFAULT
    return Argument(name=name, type=_parse_type(type_text), default=arg_default,
                    kwarg_only=kwarg_only)


def parse_schema(text: str) -> FunctionSchema:
    """Parse `name.overload(args) -> returns` into a FunctionSchema."""
    m = re.match(r"^\s*([\w.]+)\((.*)\)\s*->\s*(.+?)\s*$", text)
    if not m:
        raise ValueError(f"bad schema: {text!r}")
    qualname, args_text, ret_text = m.groups()
    name, _, overload = qualname.partition(".")
    arguments, kwarg_only = [], False
    for part in _split_top(args_text):
        if part == "*":
            kwarg_only = True
            continue
        arguments.append(_parse_arg(part, kwarg_only))
    if ret_text.startswith("(") and ret_text.endswith(")"):
        ret_parts = _split_top(ret_text[1:-1])
    else:
        ret_parts = [ret_text]
    returns = []
    for part in ret_parts:
        type_text, _, rname = part.rpartition(" ") if " " in part.strip() else (part, "", "")
        returns.append(Argument(name=rname, type=_parse_type(type_text)))
    tensor_args = tuple((i, a.name) for i, a in enumerate(arguments) if a.type.base == "Tensor")
    return FunctionSchema(name=name, overload=overload, arguments=tuple(arguments),
                          returns=tuple(returns), tensor_args=tensor_args)
