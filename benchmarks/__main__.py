"""`python -m benchmarks`: see benchmarks/cli.py."""
import sys

from benchmarks.cli import main

sys.exit(main())
