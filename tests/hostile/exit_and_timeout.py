# causal_mask ends its own process; scaled_scores never returns. noisy_sum is left correct.
import os


def causal_mask(n):
    os._exit(3)


def scaled_scores(q, k):
    while True:
        pass
