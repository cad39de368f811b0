"""integration tests: see docs/development.md, "Where tests go"."""
