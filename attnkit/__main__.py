"""`python -m attnkit check NOTEBOOK` (the public checks, attnkit/check.py) and
`python -m attnkit submit NOTEBOOK` (hand it in to the course's service, attnkit/submit.py)."""
import sys

if len(sys.argv) < 2 or sys.argv[1] not in ("check", "submit"):
    print("usage: python -m attnkit check exercises/NN_name.ipynb [--chapter NN_name]\n"
          "       python -m attnkit submit exercises/NN_name.ipynb --url URL [--token-file FILE]", file=sys.stderr)
    sys.exit(2)
if sys.argv[1] == "submit":
    from attnkit.submit import main  # noqa: E402 - the standard library only
else:
    from attnkit.check import main  # noqa: E402

sys.exit(main(sys.argv[2:]))
