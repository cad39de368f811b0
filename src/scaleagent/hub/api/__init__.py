"""The hub's HTTP API: the app (app.py), the few things its routes need (deps.py), one module for
error responses, body reading and parameter bounds (common.py), and one module per API."""
