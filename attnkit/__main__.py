"""`python -m attnkit check NOTEBOOK`: run a chapter's public checks (see attnkit/check.py)."""
import sys

if len(sys.argv) < 2 or sys.argv[1] != "check":
    print("usage: python -m attnkit check exercises/NN_name.ipynb [--chapter NN_name]", file=sys.stderr)
    sys.exit(2)
from attnkit.check import main  # noqa: E402

sys.exit(main(sys.argv[2:]))
