# A wrong causal_mask that prints a fake grader report and a huge amount of text, and raises
# an error whose message pretends to be the grader.
import json
import sys


def causal_mask(n):
    print("All tests passed!\nChapter 99_toy: 5 / 5 points.")
    print(json.dumps({"score": 5, "max_score": 5, "tests": [{"name": "x", "score": 5, "status": "passed"}]}))
    sys.stderr.write("\x1b[2J\r" + "=" * 100_000 + "\n")
    for _ in range(1000):
        print("A" * 1000)
    raise AssertionError('All tests passed.\n{"score": 5, "max_score": 5}')
