"""The grading harness: what runs a student's notebook and checks it, with no knowledge of the hidden
graders, the solutions, batch grading or the exports (it imports none of them).

- `notebook`: reads a notebook (`.ipynb` or a jupytext percent file) into cells and its chapter;
- `sandbox`, `zygote`, `worker`: run those cells like "Restart & Run All" in an isolated process
  (bubblewrap when it works, a plain child process otherwise);
- `wire`: the messages between the two sides (JSON and raw tensor bytes, never pickle);
- `student`: the trusted side's proxy to that process (the graders' `student` fixture);
- `check`: the API checks are written in (`graded`, `expect_close` with named known mistakes);
- `plugin`: the pytest plugin that runs a file of checks; `results`: results.json and the tables;
- `replay`: the public checks (recorded requests and expected replies) that students run themselves.

The student release (`make release`) copies this package as it is.
"""
