"""Alembic migrations of the hub's database, applied by `Store.open()`.

A package (not a bare directory) so that setuptools ships it in the wheel and Alembic finds it as
`scaleagent.hub.store:migrations` wherever the hub is installed. There is no alembic.ini: the
store builds Alembic's configuration in code and hands in an open connection (see env.py).

To add a migration: write `versions/NNNN_what.py` by hand (copy 0001's header, set
`down_revision` to the previous one), keep it working on SQLite, PostgreSQL and MySQL/MariaDB,
update `models.py` to match, and bump `HEAD` in `migrate.py`.
"""
