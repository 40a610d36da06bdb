# Every graded function runs forever: the submission's wall-clock budget must stop the grading.
def causal_mask(n):
    while True:
        pass


def scaled_scores(q, k):
    while True:
        pass


def noisy_sum(x):
    while True:
        pass
