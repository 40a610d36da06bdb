"""The course autograder: hidden pytest graders run against a sandboxed student process.

Entry point: `python -m autograder grade PATH... --out DIR`.
"""
