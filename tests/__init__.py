"""Scale Agent's tests: docs/development.md says which kind goes where."""
