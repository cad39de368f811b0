"""e2e tests: see docs/development.md, "Where tests go"."""
