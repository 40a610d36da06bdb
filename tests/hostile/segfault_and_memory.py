# causal_mask crashes the interpreter; scaled_scores asks for memory until it is refused.
import ctypes

import torch


def causal_mask(n):
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def scaled_scores(q, k):
    hog = []
    while True:
        hog.append(torch.empty(256 << 20, dtype=torch.uint8))
