"""Build tooling: exercises and book pages generated from `solutions/` (one source of truth)."""
