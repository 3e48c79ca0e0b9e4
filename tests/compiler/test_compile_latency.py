"""What a first compile costs, counted rather than timed: no heavy import on its path."""
import os
import subprocess
import sys

FIRST_COMPILE = """
import sys
import numpy as np
import compiler, eager
x = eager.tensor(np.arange(24, dtype=np.float32).reshape(4, 6))
w = eager.tensor(np.ones((6, 5), dtype=np.float32))
def f(x, w):
    return eager.softmax((x @ w).relu() * 2, -1).sum() + x.tanh().mean()
cf = compiler.compile(f, backend="native")
cf(x, w)
assert cf.entries, "nothing was compiled"
print(sorted(m for m in ("networkx",) if m in sys.modules))
"""


def test_import_compiler_and_a_first_compile_do_not_import_networkx(tmp_path):
    out = subprocess.run([sys.executable, "-c", FIRST_COMPILE], capture_output=True,
                         text=True, env=dict(os.environ, KILN_CACHE_DIR=str(tmp_path)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
