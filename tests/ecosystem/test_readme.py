"""The README's transformers example runs as written, in a fresh process."""
import os
import subprocess
import sys
from pathlib import Path

import ecosystem_zoo as zoo

ROOT = Path(__file__).resolve().parents[2]


def test_the_readmes_transformers_example_trains_and_generates_on_kiln():
    zoo.need("transformers")
    text = (ROOT / "README.md").read_text()
    start = text.index("```python\nimport importlib.util")
    code = text[start + len("```python\n"):text.index("```\n", start + 10)]
    assert "GPT2LMHeadModel" in code and "generate" in code
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("tensor([[ 5, 17, 42,  8,"), run.stdout
