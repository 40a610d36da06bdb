"""The seed offset in force: 0, or what `seeds.shifted_seeds` moved it to (the public checks' inputs,
per-student inputs).

A module of its own, importing nothing: `check.seeded` draws its inputs from it and `memo` keys every
cached reference value by it, and neither needs the other for that.
"""
SEED_OFFSET = 0
