# Uses every random generator at load time and in its answers: the harness seeds them all.
import random

import numpy as np
import torch

_warmup = (random.random(), np.random.rand(), torch.rand(3))


def scaled_scores(q, k):
    noise = random.random() * 0 + float(np.random.rand()) * 0
    return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + noise


def noisy_sum(x):
    return x.sum() + torch.randn(())
