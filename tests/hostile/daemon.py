# At load time: start two detached (double-forked, setsid) daemons that outlive the cell.
# One keeps rewriting the results file; the other execs `sleep` so that the host can see it.
import os
import time


def _detach(body):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            try:
                body()
            finally:
                os._exit(0)
        os._exit(0)


def _rewrite_results():
    fake = '{"score": 1000, "max_score": 5, "output": "hacked", "tests": []}'
    for _ in range(400):
        for path in ("__RESULTS__", "/autograder/results/results.json"):
            try:
                with open(path, "w") as f:
                    f.write(fake)
            except OSError:
                pass
        time.sleep(0.05)


def _visible_sleeper():
    os.execv("/bin/sleep", ["sleep", "__MARKER__"])


def _sleeper_runs():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"__MARKER__" in f.read():
                    return True
        except OSError:
            pass
    return False


def start_daemons():
    _detach(_rewrite_results)
    _detach(_visible_sleeper)
    for _ in range(500):  # until the sleeper has exec'd
        if _sleeper_runs():
            return True
        time.sleep(0.01)
    return False


start_daemons()
