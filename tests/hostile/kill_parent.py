# causal_mask kills its parent (the zygote, in the fallback) and, where that is safe for the
# machine running the tests (__KILL_ALL__), every process it can signal.
import os
import signal
import time


def causal_mask(n):
    try:
        os.kill(os.getppid(), signal.SIGKILL)
    finally:
        if __KILL_ALL__:
            os.kill(-1, signal.SIGKILL)
        time.sleep(5)
