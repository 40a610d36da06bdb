import os
import sys

from autograder.cli import main

code = main()
# Everything is written, closed and flushed by now (results atomically, the sandbox and the workers
# stopped). The interpreter's own teardown would take another 0.35 s with torch loaded, as long as a
# student waits for `python -c "import torch"` itself to start (benchmarks/bench_grade_one.py).
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
