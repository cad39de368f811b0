from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiomysql
import asyncpg
import pytest

from tests.databases import BACKENDS, HOW_TO_START, MY, PG, emptied, run_async, unique_db_name
from tests.hang_report import (  # noqa: F401 (hooks: a hung test's summary names what its event loop awaited)
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
    pytest_terminal_summary,
)
from tests.helpers import KubesimProcess, start_kubesim

E2E_ENV = "SCALE_AGENT_E2E_KUBECONFIG"


@pytest.fixture(scope="session")
def kubesim(tmp_path_factory: pytest.TempPathFactory) -> KubesimProcess:
    """One kubesim process with two clusters, shared by the tests that only read or use own names."""
    proc = start_kubesim(tmp_path_factory.mktemp("kubesim"), "--clusters", "2", "--bookmark-interval", "1")
    yield proc
    assert proc.stop() == 0


@dataclass
class Target:
    """A Kubernetes API to hold to the same checks: kubesim, or a real cluster (e2e)."""

    name: str
    kubeconfig: Path
    limited_kubeconfig: Path | None
    is_kubesim: bool


@pytest.fixture(params=["kubesim", pytest.param("real", marks=pytest.mark.e2e)])
def target(request: pytest.FixtureRequest) -> Target:
    if request.param == "kubesim":
        k: KubesimProcess = request.getfixturevalue("kubesim")
        return Target("kubesim", k.admin(0), k.limited(0), True)
    path = os.environ.get(E2E_ENV)
    if not path:
        pytest.skip(f"{E2E_ENV} is not set: no real cluster to test against")
    limited = os.environ.get(E2E_ENV + "_LIMITED")
    return Target("real", Path(path), Path(limited) if limited else None, False)


def kubectl_binaries() -> list[str]:
    """The kubectl on PATH plus any named in SCALE_AGENT_EXTRA_KUBECTLS (scripts/test adds Debian's)."""
    found = [shutil.which("kubectl") or "kubectl-missing"]
    for extra in filter(None, os.environ.get("SCALE_AGENT_EXTRA_KUBECTLS", "").split(os.pathsep)):
        if os.access(extra, os.X_OK) and os.path.realpath(extra) != os.path.realpath(found[0]):
            found.append(extra)
    return found


def _kubectl_id(path: str) -> str:
    return "kubectl" if path == shutil.which("kubectl") else f"kubectl@{Path(path).parent.parent.parent.name}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "kubectl_bin" in metafunc.fixturenames:
        binaries = kubectl_binaries()
        metafunc.parametrize("kubectl_bin", binaries, ids=[_kubectl_id(b) for b in binaries])


@pytest.fixture
def kubectl_bin(request: pytest.FixtureRequest) -> str:
    path = request.param
    if path == "kubectl-missing":
        pytest.fail("kubectl is not installed: scripts/test installs it (Debian package kubernetes-client)")
    return path


# --- real databases (see databases.py) ---------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_db() -> Iterator[str]:
    """A fresh PostgreSQL database for this session, created and dropped as user postgres."""
    name = unique_db_name()

    async def create() -> None:
        conn = await asyncpg.connect(**PG, timeout=5)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    async def drop() -> None:
        conn = await asyncpg.connect(**PG, timeout=5)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    try:
        run_async(create)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        pytest.fail(f"PostgreSQL at 127.0.0.1:5432 (user postgres, database test) is not usable: {exc}; {HOW_TO_START}")
    yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    run_async(drop)


@pytest.fixture(scope="session")
def mariadb_db() -> Iterator[str]:
    """A fresh MariaDB database for this session, created and dropped as root."""
    name = unique_db_name()

    async def execute(sql: str) -> None:
        conn = await aiomysql.connect(**MY, connect_timeout=5)
        try:
            async with conn.cursor() as cur:
                await cur.execute(sql)
        finally:
            conn.close()

    try:
        run_async(lambda: execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
    except (OSError, aiomysql.Error) as exc:
        pytest.fail(f"MariaDB at 127.0.0.1:3306 (user root, no password) is not usable: {exc}; {HOW_TO_START}")
    yield f"mysql://root@127.0.0.1:3306/{name}"
    run_async(lambda: execute(f"DROP DATABASE IF EXISTS `{name}`"))


@pytest.fixture(params=BACKENDS)
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty database (no tables of ours) on each backend, as a user would write it."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'data' / 'hub.db'}"  # 'data' does not exist yet
    url: str = request.getfixturevalue("postgres_db" if request.param == "postgresql" else "mariadb_db")
    return emptied(url)
