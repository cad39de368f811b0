from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from helpers import KubesimProcess, start_kubesim  # noqa: E402

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
