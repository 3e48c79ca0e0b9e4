"""A pickle interpreter under PyTorch's weights_only rules (torch/_weights_only_unpickler.py).

It runs the opcodes torch.load(weights_only=True) runs, those of protocol 2 that build
data, and no other; GLOBAL takes names only from a table the caller gives
(eager/serialization_torch_globals.py: PyTorch's allowlist in kiln's objects), and REDUCE
calls only that table's `Call`s. Beyond PyTorch's rules, for files that are hostile rather
than merely foreign:

- a read never passes the end of the pickle (a string claiming 4 GiB is refused unread);
- the objects built are charged by their size (sys.getsizeof, 8 bytes a reference held,
  64 a dict entry or memo entry) against a budget the caller sizes from the pickle's
  length. A legitimate pickle's objects take 10 to 40 times its length (a state dict's
  kiln tensors most); what the budget stops is a few bytes copying a memoised object again
  and again (OrderedDict of a memoised dict, BUILD with a memoised state), which would
  otherwise grow with the square of the pickle's length;
- a dict key or set item that is a tuple holds at most 64 items and no tuple: hashing a
  tuple is not cached, and memoised tuples nest in a few bytes into one whose hash takes
  exponential time; keys whose hashes Python does not salt (numbers, tuples) are refused
  when more than 8 distinct ones share a hash, which would make building the dict take
  time quadratic in its size;
- BUILD sets attributes only on an OrderedDict (a state dict's `_metadata`), from a dict of
  names; NEWOBJ and EMPTY_SET are refused; a pickle ends at its STOP with one object built.
"""
from __future__ import annotations

import pickle
import pickletools
import reprlib
import sys
from collections import OrderedDict
from collections.abc import Callable
from struct import unpack
from typing import Any, NamedTuple

from eager.serialization_files import CorruptFileError, WeightsOnlyError


class Call(NamedTuple):
    """A table entry that REDUCE may call: `fn(*args)`. `fn` raises CorruptFileError or
    WeightsOnlyError (saying why; the interpreter adds where) for arguments that no file
    kiln loads holds; any other exception it raises is taken for corruption too."""
    name: str
    fn: Callable

    def __repr__(self) -> str:
        return self.name


class Lacking(NamedTuple):
    """A table entry for a global PyTorch allows and kiln cannot load (`what`: sparse
    tensors, bfloat16, ...): a pickle naming it is refused, saying so."""
    what: str


# torch._utils's IMPORT_MAPPING and NAME_MAPPING: protocol 2 writes Python 2's names
# (`__builtin__ set`), which PyTorch reads as Python 3's, and so names them in its errors
_MODULE_RENAMES = {"__builtin__": "builtins", "copy_reg": "copyreg", "Queue": "queue",
                   "repr": "reprlib", "_abcoll": "collections.abc", "UserDict": "collections",
                   "UserList": "collections", "UserString": "collections", "whichdb": "dbm",
                   "StringIO": "io", "cStringIO": "io"}
_RENAMES = {
    ("__builtin__", "xrange"): ("builtins", "range"),
    ("__builtin__", "reduce"): ("functools", "reduce"),
    ("__builtin__", "intern"): ("sys", "intern"), ("__builtin__", "unichr"): ("builtins", "chr"),
    ("__builtin__", "unicode"): ("builtins", "str"), ("__builtin__", "long"): ("builtins", "int"),
    ("itertools", "izip"): ("builtins", "zip"), ("itertools", "imap"): ("builtins", "map"),
    ("itertools", "ifilter"): ("builtins", "filter"),
    ("itertools", "ifilterfalse"): ("itertools", "filterfalse"),
    ("itertools", "izip_longest"): ("itertools", "zip_longest"),
    ("UserDict", "IterableUserDict"): ("collections", "UserDict"),
    ("UserList", "UserList"): ("collections", "UserList"),
    ("UserString", "UserString"): ("collections", "UserString"),
    ("__builtin__", "basestring"): ("builtins", "str"),
    ("exceptions", "StandardError"): ("builtins", "Exception"),
    ("UserDict", "UserDict"): ("collections", "UserDict")}
_NAME_MAX = 1024  # bytes in a GLOBAL's module or name line
_SAME_HASH_MAX = 8
_KEY_ITEMS_MAX = 64
_UNSALTED = (int, float, complex, tuple)  # str and bytes hashes are salted per process
_EXPECTED = (IndexError, KeyError, TypeError, ValueError, OverflowError, UnicodeError,
             RuntimeError)  # what a damaged pickle makes a step or a table's function raise


class Unpickler:
    """Runs one pickle read from binary file `source`, from where it stands, that ends
    before byte `end` of it. `where` names the pickle in errors (archive/data.pkl);
    `persistent_load(pid)` answers BINPERSID; `budget`: bytes of objects it may build."""

    def __init__(self, source, end: int, file_name: str, where: str, globals_table: dict,
                 persistent_load: Callable | None, budget: int):
        self.source, self.end, self.pos = source, end, source.tell()
        self.file_name, self.where, self.table = file_name, where, globals_table
        self.persistent_load, self.budget = persistent_load, budget
        self.at = self.pos
        self.stack: list = []
        self.marks: list = []
        self.memo: dict = {}
        self.hashes: dict = {}  # hash -> the distinct unsalted keys seen with it

    def load(self) -> Any:
        try:
            while True:
                self.at = self.pos
                code = self.read(1)[0]
                if code == _STOP:
                    return self.finish()
                step = _STEPS.get(code)
                if step is None:
                    raise _unknown_opcode(code)
                step(self)
        except CorruptFileError as e:
            raise type(e)(self.located(str(e))) from None
        except _EXPECTED as e:
            raise CorruptFileError(self.located(f"{type(e).__name__}: {e}")) from None

    def located(self, why: str) -> str:
        return f"eager.load: {self.file_name}: {self.where}, opcode at byte {self.at}: {why}"

    def read(self, n: int) -> bytes:
        if n > self.end - self.pos:
            raise CorruptFileError(f"needs {n} bytes where {self.end - self.pos} remain")
        data = self.source.read(n)
        if len(data) != n:
            raise CorruptFileError(f"needs {n} bytes where the file ends")
        self.pos += n
        return data

    def read_line(self) -> str:
        line = self.source.readline(min(_NAME_MAX, self.end - self.pos))
        self.pos += len(line)
        if not line.endswith(b"\n"):
            raise CorruptFileError(f"a GLOBAL's name {line[:40]!r} does not end in a "
                                   f"newline within {_NAME_MAX} bytes")
        return line[:-1].decode("utf-8")

    def charge(self, nbytes: int) -> None:
        self.budget -= nbytes
        if self.budget < 0:
            raise CorruptFileError("the pickle builds more objects than its length accounts "
                                   "for (a pickle bomb?)")

    def push_new(self, obj) -> None:
        self.charge(sys.getsizeof(obj) + 8)
        self.stack.append(obj)

    def pop_mark(self) -> list:
        if not self.marks:
            raise CorruptFileError("an opcode closes a MARK that was never set")
        items, self.stack = self.stack, self.marks.pop()
        return items

    def set_items(self, items: list) -> None:
        target = self.stack[-1]
        if type(target) not in (dict, OrderedDict):
            raise WeightsOnlyError(f"SETITEM on a {type(target).__name__}; only dicts are "
                                   f"set")
        if len(items) % 2:
            raise CorruptFileError("SETITEMS has a key without its value")
        keys = items[::2]
        check_keys(keys, self.hashes)
        self.charge(64 * len(keys))
        target.update(zip(keys, items[1::2]))

    def finish(self) -> Any:
        if self.marks or len(self.stack) != 1:
            raise CorruptFileError(f"STOP leaves {len(self.stack)} objects and "
                                   f"{len(self.marks)} marks; a pickle builds one object")
        return self.stack.pop()


def check_keys(keys, seen: dict) -> None:
    """Refuse any of `keys` that is a tuple of more than 64 items or of a tuple, or that
    makes more than 8 distinct unsalted keys share a hash with those in `seen` (hash ->
    the distinct unsalted keys met with it)."""
    for key in keys:
        if isinstance(key, tuple) and (len(key) > _KEY_ITEMS_MAX or
                                       any(isinstance(k, tuple) for k in key)):
            raise CorruptFileError(f"a dict key or set item {brief(key)}: a tuple key holds "
                                   f"at most {_KEY_ITEMS_MAX} items and no tuple")
        if not isinstance(key, _UNSALTED):
            continue
        same = seen.setdefault(hash(key), [])
        if key not in same:
            same.append(key)
            if len(same) > _SAME_HASH_MAX:
                raise CorruptFileError(f"more than {_SAME_HASH_MAX} distinct keys share the "
                                       f"hash {hash(key)} (a hash-flooding attack?)")


def _unknown_opcode(code: int) -> CorruptFileError:
    op = pickletools.code2op.get(chr(code))
    if op is None:
        return CorruptFileError(f"byte 0x{code:02x} is no pickle opcode")
    return WeightsOnlyError(f"the pickle uses opcode {op.name}, which kiln does not run: "
                            f"kiln reads weights only, under the rules of "
                            f"torch.load(weights_only=True)")


_brief = reprlib.Repr()
_brief.maxlevel, _brief.maxstring, _brief.maxother = 3, 60, 60
brief = _brief.repr  # a value's repr, cut short: pickled values may be huge, deep or cyclic


# one function per opcode --------------------------------------------------------------------
def _global(u: Unpickler) -> None:
    module, name = u.read_line(), u.read_line()
    module, name = _RENAMES.get((module, name), (_MODULE_RENAMES.get(module, module), name))
    full = f"{module}.{name}"
    if full not in u.table:
        raise WeightsOnlyError(
            f"the pickle asks for GLOBAL {full}, which kiln does not load: kiln reads "
            f"weights only (tensors, state dicts, containers, numbers, strings, dtypes, "
            f"sizes, devices), under the rules of torch.load(weights_only=True)")
    entry = u.table[full]
    if type(entry) is Lacking:
        raise CorruptFileError(f"the pickle asks for {full}: the file holds {entry.what}, "
                               f"which kiln lacks")
    u.charge(8)
    u.stack.append(entry)


def _reduce(u: Unpickler) -> None:
    args = u.stack.pop()
    call = u.stack[-1]
    if type(call) is not Call:
        raise WeightsOnlyError(f"the pickle calls {type(call).__name__} {brief(call)}; kiln "
                               f"calls only the functions of weights-only files")
    if type(args) is not tuple:
        raise CorruptFileError(f"{call.name} is called with {brief(args)}, not a tuple")
    try:
        result = call.fn(*args)
    except CorruptFileError as e:
        raise type(e)(f"{call.name}: {e}") from None
    except _EXPECTED as e:
        raise CorruptFileError(f"{call.name}{brief(args)}: {type(e).__name__}: {e}") from None
    u.charge(sys.getsizeof(result))
    u.stack[-1] = result


def _build(u: Unpickler) -> None:
    state = u.stack.pop()
    inst = u.stack[-1]
    if type(inst) is not OrderedDict:
        raise WeightsOnlyError(f"BUILD of a {type(inst).__name__}; kiln sets attributes "
                               f"only on an OrderedDict (a state dict's _metadata)")
    if type(state) is not dict or not all(type(k) is str for k in state):
        raise CorruptFileError(f"BUILD of an OrderedDict with {brief(state)}, not a dict "
                               f"of names")
    u.charge(64 * len(state))
    inst.__dict__.update(state)


def _list_target(u: Unpickler) -> list:
    if type(u.stack[-1]) is not list:
        raise WeightsOnlyError(f"APPEND to a {type(u.stack[-1]).__name__}; only lists are "
                               f"appended to")
    return u.stack[-1]


def _append(u: Unpickler) -> None:
    item = u.stack.pop()
    _list_target(u).append(item)
    u.charge(8)


def _appends(u: Unpickler) -> None:
    items = u.pop_mark()
    _list_target(u).extend(items)
    u.charge(8 * len(items))


def _setitem(u: Unpickler) -> None:
    value, key = u.stack.pop(), u.stack.pop()
    u.set_items([key, value])


def _setitems(u: Unpickler) -> None:
    u.set_items(u.pop_mark())


def _mark(u: Unpickler) -> None:
    u.charge(64)
    u.marks.append(u.stack)
    u.stack = []


def _tuple(u: Unpickler) -> None:
    u.push_new(tuple(u.pop_mark()))


def _tuple_of(n: int):
    def step(u: Unpickler) -> None:
        if len(u.stack) < n:
            raise CorruptFileError(f"TUPLE{n} finds {len(u.stack)} objects on the stack")
        items = tuple(u.stack[-n:])
        del u.stack[-n:]
        u.push_new(items)
    return step


def _constant(value):
    def step(u: Unpickler) -> None:
        u.charge(8)
        u.stack.append(value)
    return step


def _empty(make):
    def step(u: Unpickler) -> None:
        u.push_new(make())
    return step


def _number(fmt: str, size: int):
    def step(u: Unpickler) -> None:
        u.push_new(unpack(fmt, u.read(size))[0])
    return step


def _binunicode(u: Unpickler) -> None:
    (n,) = unpack("<I", u.read(4))
    u.push_new(str(u.read(n), "utf-8", "surrogatepass"))


def _short_binstring(u: Unpickler) -> None:
    u.push_new(u.read(u.read(1)[0]).decode("utf-8"))  # torch.load's encoding="utf-8"


def _long1(u: Unpickler) -> None:
    u.push_new(pickle.decode_long(u.read(u.read(1)[0])))


def _binpersid(u: Unpickler) -> None:
    pid = u.stack.pop()
    if u.persistent_load is None:
        raise CorruptFileError(f"persistent id {brief(pid)} where none belongs")
    if type(pid) is not tuple or not pid or pid[0] != "storage":
        raise WeightsOnlyError(f"persistent id {brief(pid)}; only storages are loaded")
    u.push_new(u.persistent_load(pid))


def _memo_index(u: Unpickler, size: int) -> int:
    return unpack("<I", u.read(4))[0] if size == 4 else u.read(1)[0]


def _get(size: int):
    def step(u: Unpickler) -> None:
        index = _memo_index(u, size)
        if index not in u.memo:
            raise CorruptFileError(f"memo {index} is read before it is written")
        u.charge(8)
        u.stack.append(u.memo[index])
    return step


def _put(size: int):
    def step(u: Unpickler) -> None:
        index = _memo_index(u, size)
        u.charge(64)
        u.memo[index] = u.stack[-1]
    return step


def _proto(u: Unpickler) -> None:
    u.read(1)  # any number, as PyTorch: what a pickle may do is the opcodes below


_STOP = pickle.STOP[0]
_STEPS: dict[int, Callable[[Unpickler], None]] = {
    pickle.GLOBAL[0]: _global, pickle.REDUCE[0]: _reduce, pickle.BUILD[0]: _build,
    pickle.APPEND[0]: _append, pickle.APPENDS[0]: _appends,
    pickle.SETITEM[0]: _setitem, pickle.SETITEMS[0]: _setitems,
    pickle.MARK[0]: _mark, pickle.TUPLE[0]: _tuple, pickle.TUPLE1[0]: _tuple_of(1),
    pickle.TUPLE2[0]: _tuple_of(2), pickle.TUPLE3[0]: _tuple_of(3),
    pickle.NONE[0]: _constant(None), pickle.NEWFALSE[0]: _constant(False),
    pickle.NEWTRUE[0]: _constant(True), pickle.EMPTY_TUPLE[0]: _constant(()),
    pickle.EMPTY_LIST[0]: _empty(list), pickle.EMPTY_DICT[0]: _empty(dict),
    pickle.BININT[0]: _number("<i", 4), pickle.BININT1[0]: _number("<B", 1),
    pickle.BININT2[0]: _number("<H", 2), pickle.BINFLOAT[0]: _number(">d", 8),
    pickle.BINUNICODE[0]: _binunicode, pickle.SHORT_BINSTRING[0]: _short_binstring,
    pickle.LONG1[0]: _long1, pickle.BINPERSID[0]: _binpersid,
    pickle.BINGET[0]: _get(1), pickle.LONG_BINGET[0]: _get(4),
    pickle.BINPUT[0]: _put(1), pickle.LONG_BINPUT[0]: _put(4),
    pickle.PROTO[0]: _proto,
}
