"""A differential fuzzer for values: each program is compiled once and called several times
with new index, mask and value inputs of the same shapes (out-of-range indices included);
every call must give what eager gives, or raise the same error with the same message.

A compiled function that baked a value it read during capture into its graph (the first
call's indices, mask or number) fails here on its second call."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import compiler
import eager
from eager.testing import assert_close


def _setitem(x, i, v):
    y = x * 1
    y[i] = v
    return y


def _setitem_mask(x, m):
    y = x * 1
    y[m] = -2.0
    return y


# name -> (program, the inputs it takes besides x: "i" rows, "j" columns, "g" a (rows, 3)
# index along dim 1, "m" a mask like x, "r" a mask of rows, "v" values for rows of i)
PROGRAMS = {
    "rows": (lambda x, i: x[i] * 3, "i"),
    "columns": (lambda x, j: x[:, j] + 1, "j"),
    "points": (lambda x, i, j: x[i, j[: i.shape[0]]], "ij"),
    "mask": (lambda x, m: x[m] * 2, "m"),
    "row mask": (lambda x, r: x[r].sum(0), "r"),
    "index_select": (lambda x, i: x.index_select(0, i).exp(), "i"),
    "embedding": (lambda x, i: eager.embedding(x, i) - 1, "i"),
    "gather": (lambda x, g: x.gather(1, g) * x[:, :3], "g"),
    "scatter_add": (lambda x, g: x.scatter_add(1, g, x[:, :3]), "g"),
    "index_put": (lambda x, i, v: x.index_put((i,), v, accumulate=True), "iv"),
    "setitem": (_setitem, "iv"),
    "setitem mask": (_setitem_mask, "m"),
    "masked_fill": (lambda x, m: x.masked_fill(m, 0.5) + x, "m"),
    "item": (lambda x, i: x * i.sum().item(), "i"),
    "tolist": (lambda x, i: x[:, : len(set(i.tolist()))], "i"),
    "int": (lambda x, i: x[int(i[0].clamp(0, x.shape[0] - 1))] * 2, "i"),
    "bool": (lambda x, i: x + 1 if bool(i.amin() > 0) else x - 1, "i"),
}


def _inputs(draw, kinds: str, rows: int, cols: int, count: int) -> list:
    """New values for one call; indices reach one past either end now and then."""
    out = []
    for kind in kinds:
        if kind in "ij":
            size = rows if kind == "i" else cols
            low, high = (-size - 1, size) if draw(st.integers(0, 3)) == 0 else (-size, size - 1)
            values = draw(st.lists(st.integers(low, high), min_size=count, max_size=count))
            out.append(eager.tensor(values, dtype=eager.int64))
        elif kind == "g":
            high = cols if draw(st.integers(0, 3)) == 0 else cols - 1
            values = draw(st.lists(st.integers(0, high), min_size=rows * 3, max_size=rows * 3))
            out.append(eager.tensor(values, dtype=eager.int64).reshape(rows, 3))
        elif kind in "mr":
            shape = (rows, cols) if kind == "m" else (rows,)
            bits = draw(st.lists(st.booleans(), min_size=int(np.prod(shape)),
                                 max_size=int(np.prod(shape))))
            out.append(eager.tensor(np.array(bits).reshape(shape)))
        else:  # "v": one row of values per index
            values = draw(st.lists(st.floats(-4, 4, width=32), min_size=count * cols,
                                   max_size=count * cols))
            out.append(eager.tensor(values, dtype=eager.float32).reshape(count, cols))
    return out


def _outcome(fn, args):
    try:
        return fn(*args), None
    except (IndexError, RuntimeError) as e:
        return None, e


@pytest.mark.parametrize("backend", ["eager", "native"])
@pytest.mark.parametrize("name", PROGRAMS)
@settings(max_examples=12, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_compiled_calls_agree_with_eager_for_new_values(name, backend, data):
    program, kinds = PROGRAMS[name]
    rows, cols = data.draw(st.sampled_from([(5, 4), (3, 7)]), label="rows, cols")
    count = data.draw(st.integers(1, 4), label="indices per call")
    compiled = compiler.compile(program, backend=backend)
    for call in range(4):
        x = eager.tensor(data.draw(st.lists(st.floats(-3, 3, width=32), min_size=rows * cols,
                                            max_size=rows * cols)),
                         dtype=eager.float32).reshape(rows, cols)
        args = [x] + _inputs(data.draw, kinds, rows, cols, count)
        want, error = _outcome(program, args)
        got, got_error = _outcome(compiled, args)
        if error is not None:
            assert type(got_error) is type(error) and str(got_error) == str(error), \
                f"call {call}: eager raised {error!r}, compiled {got_error!r}"
        else:
            assert got_error is None, f"call {call}: compiled raised {got_error!r}"
            assert_close(got, want, msg=f"call {call} of {name}")
