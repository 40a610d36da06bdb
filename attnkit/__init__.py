"""Provided helpers for the course "Attention: from seq2seq to Reformer".

Nothing here is a graded exercise: data generators, a training loop with a
progress bar, plotting and device choice, shared by every chapter.
"""
from attnkit.device import pick_device, seed_everything

__all__ = ["pick_device", "seed_everything"]
