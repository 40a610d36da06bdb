# causal_mask forks forever, in every child too; probe_forks counts how many forks succeed.
import os
import time


def causal_mask(n):
    while True:
        try:
            os.fork()
        except OSError:
            time.sleep(0.01)


def probe_forks(n):
    made = 0
    for _ in range(n):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        made += 1
    return made
