"""The container image (Containerfile, docs/container-image.md), as a platform engineer would run it.

`scripts/test` builds the image (scripts/image, on a base made from Debian's packages) and says
how to run it here: with podman, or from its unpacked root filesystem with chroot as its user
(tests/image_helpers.py). The hub and the agent run from the image, the agent against kubesim and
against the real control plane, and the hub receives what it streams. Without an image these
tests are skipped, except under CI, where the image is part of what is tested
(SCALE_AGENT_E2E_IMAGE_TESTS=0 skips them there too).
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from scaleagent import __version__
from tests.conftest import Target
from tests.helpers import free_port, make_hub_pki, write_yaml
from tests.image_helpers import (
    IMAGE_ENV,
    ROOTFS_ENV,
    ContainerImage,
    ImageAgent,
    ImageHub,
    image_from_env,
    share,
    share_dir,
    status_ids,
)

RUNTIME_USER = (65532, 65532)
# What the image's user may write: the temporary folders, and its home and working directory
# (where the hub's default SQLite database goes). Nothing else: not the program, not Python.
WRITABLE = {"/tmp", "/var/tmp", "/var/lib/scale-agent"}


@pytest.fixture(scope="session")
def image() -> ContainerImage:
    found = image_from_env()
    if found is not None:
        return found
    reason = (
        f"no container image to test: {IMAGE_ENV} (podman) or {ROOTFS_ENV} (an unpacked rootfs) is not set; "
        "scripts/test builds one (scripts/image build)"
    )
    if os.environ.get("SCALE_AGENT_E2E_IMAGE_TESTS") == "0":
        pytest.skip("SCALE_AGENT_E2E_IMAGE_TESTS=0: the container image is not tested")
    if os.environ.get("CI"):
        pytest.fail(reason + ": under CI the image must be built and tested")
    pytest.skip(reason)


@pytest.fixture
def shared(image: ContainerImage, tmp_path: Path) -> Path:
    return share_dir(tmp_path / "shared", image.user()[1])


def http_get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def test_the_image_says_its_version_and_how_to_use_it(image: ContainerImage):
    version = image.run(["--version"])
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"scale-agent {__version__}"
    usage = image.run([])  # no arguments: the image's default command is --help
    assert usage.returncode == 0, usage.stderr
    for command in ("agent", "hub", "get", "apply", "accounts"):
        assert re.search(rf"^\s+{command}\s", usage.stdout, re.M), usage.stdout
    hub_help = image.run(["hub", "--help"])
    assert hub_help.returncode == 0 and "--grpc-port" in hub_help.stdout, hub_help.stdout + hub_help.stderr


def test_the_image_is_described_for_runtimes_and_kubernetes(image: ContainerImage):
    config = image.config
    assert config["User"] == "65532:65532"  # numeric: runAsNonRoot can check it
    assert config["Entrypoint"] == ["scale-agent"]
    assert set(config["ExposedPorts"]) == {"7002/tcp", "9091/tcp", "8082/tcp"}
    assert config["WorkingDir"] == "/var/lib/scale-agent"
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.title"] == "Scale Agent"


# Run inside the image, as the image's user and as root: what a process there may write, and
# what the image holds that it should not (build tools, caches, the build's leftovers).
INSPECT = r"""
import importlib.util, json, os, shutil, sys
skip = {"/proc", "/sys", "/dev"} | set(sys.argv[1:])
writable, leftovers = [], []
for path, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(path, d) not in skip]
    for name in [path] + [os.path.join(path, f) for f in files]:
        if not os.path.islink(name) and os.access(name, os.W_OK):
            writable.append(name)
        if "/.cache/pip" in name or name.startswith("/build") or name.endswith(".tar.gz") or (
            name.endswith(".whl") and not name.startswith("/usr/share/python-wheels/")  # Debian's, for ensurepip
        ):
            leftovers.append(name)
tools = {t: shutil.which(t) for t in ("gcc", "cc", "c++", "g++", "clang", "make", "ld", "as", "x86_64-linux-gnu-gcc-12")}
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "cwd": os.getcwd(),
    "writable": writable, "leftovers": leftovers, "tools": {t: p for t, p in tools.items() if p},
    "gcc_libs": os.path.isdir("/usr/lib/gcc"), "pip": importlib.util.find_spec("pip") is not None,
    "venv_bin": sorted(os.listdir("/opt/scale-agent/bin")),
}))
"""


def inspect_image(image: ContainerImage, shared: Path, *, as_root: bool) -> dict:
    script = share(shared, write_text(shared.parent / "inspect.py", INSPECT))
    args = [str(script), str(shared)]
    result = image.run(args, shares=[shared], entrypoint="python3", user="0:0" if as_root else None)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def write_text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_image_runs_as_its_own_user_who_may_write_only_its_working_directory(image, shared):
    doc = inspect_image(image, shared, as_root=False)
    assert (doc["uid"], doc["gid"]) == RUNTIME_USER, doc
    assert doc["cwd"] == "/var/lib/scale-agent"
    assert WRITABLE <= set(doc["writable"]), doc["writable"]
    elsewhere = [p for p in doc["writable"] if not any(p == w or p.startswith(w + "/") for w in WRITABLE)]
    assert elsewhere == [], elsewhere[:20]


def test_the_image_holds_no_compiler_no_pip_and_no_build_leftovers(image, shared):
    doc = inspect_image(image, shared, as_root=True)  # root: sees into every folder
    assert doc["uid"] == 0
    assert doc["tools"] == {} and not doc["gcc_libs"], doc["tools"]
    assert not doc["pip"], "pip is importable in the image's Python"
    assert not any(name.startswith("pip") or name.startswith("activate") for name in doc["venv_bin"]), doc["venv_bin"]
    assert "scale-agent" in doc["venv_bin"]
    assert doc["leftovers"] == [], doc["leftovers"][:20]


@pytest.fixture
def hub(image: ContainerImage, shared: Path, tmp_path: Path) -> Iterator[ImageHub]:
    """A hub from the image: TLS on its gRPC port (its certificate and key read from the shared
    folder), its database where a user who sets none gets it, in the working directory."""
    (tmp_path / "pki").mkdir()
    pki = make_hub_pki(tmp_path / "pki")
    cert, key = share(shared, pki.cert), share(shared, pki.key)
    share(shared, pki.ca)
    config = write_yaml(
        tmp_path / "hub.yaml",
        {
            "server": {"grpcPort": free_port(), "httpPort": free_port()},
            "tls": {"certFile": str(cert), "keyFile": str(key)},
        },
    )
    hub = ImageHub(image, share(shared, config), [shared])
    try:
        yield hub
    finally:
        hub.stop()


def test_hub_and_agent_from_the_image_stream_a_cluster(image, shared, hub, target: Target, tmp_path: Path):
    account = f"image-{target.name}"
    health_port = free_port()
    kubeconfig = share(shared, target.kubeconfig, "cluster.yaml")
    config = write_yaml(
        tmp_path / "agent.yaml",
        {
            "kubernetes": {"accounts": [{"name": account, "kubeConfigFile": str(kubeconfig)}]},
            "server": {"port": health_port},
            "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "tls": {"cacertFile": str(shared / "ca.pem")}},
        },
    )
    # The agent on a read-only root filesystem, nothing writable mounted: it writes nothing.
    agent = ImageAgent(image, share(shared, config), [shared], read_only=True)
    try:
        accounts = hub.wait_until(
            "/api/v1/accounts",
            lambda d: any(a["name"] == account and a["agentState"] == "watching" for a in d),
            timeout=120,
            what=f"{account} watching",
        )
        doc = next(a for a in accounts if a["name"] == account)
        assert doc["state"] == "ACTIVE" and doc["objects"] > 0, doc
        names = {o["metadata"]["name"] for o in hub.objects(account, "?kind=Namespace")}
        assert {"default", "kube-system"} <= names, names

        # The agent's health port, as a kubelet's probes would reach it.
        status, health = http_get(f"http://127.0.0.1:{health_port}/health")
        assert status == 200 and health["hub"]["state"] == "connected", health
        assert next(a for a in health["accounts"] if a["name"] == account)["state"] == "watching", health
        assert http_get(f"http://127.0.0.1:{health_port}/ready") == (200, {"ready": True})
        assert http_get(hub.url + "/ready") == (200, {"ready": True})

        # Both run as the image's user, nothing else: real, effective, saved and filesystem ids.
        for pid in (hub.pid, agent.pid):
            uids, gids = status_ids(pid)
            assert set(uids) == {RUNTIME_USER[0]} and set(gids) == {RUNTIME_USER[1]}, (pid, uids, gids)

        # The CLI from the same image reads the hub's cache.
        listed = image.run(["get", "namespaces", "--account", account, "--hub", hub.url])
        assert listed.returncode == 0, listed.stderr
        assert re.search(r"^kube-system\s+Active", listed.stdout, re.M), listed.stdout
    finally:
        agent_exit = agent.stop()
    # SIGTERM, as a kubelet or `podman stop` sends it to the image's first process: a clean exit.
    assert agent_exit == 0, "\n".join(agent.stderr[-20:])
    assert hub.stop() == 0, "\n".join(hub.log[-20:])
