"""Run Scale Agent's container image (Containerfile) the way a cluster would, as processes the
tests can watch: with podman when containers run on this machine, else from the image's unpacked
root filesystem with chroot, as the image's user, with its entry point, environment and working
directory. `scripts/setup.sh`'s ensure_image builds the image and says which (`scripts/image probe`):

- SCALE_AGENT_E2E_IMAGE: the image's name in local storage (podman);
- SCALE_AGENT_E2E_IMAGE_ROOTFS: its unpacked root filesystem, in a umoci bundle that also holds
  `image-config.json` (chroot);
- SCALE_AGENT_E2E_IMAGE_RUNNER: `podman`, `podman runtime=NAME` (an OCI runtime other than podman's
  default) or `chroot`; by default podman when SCALE_AGENT_E2E_IMAGE is set, else chroot.

Files a process needs (configurations, kubeconfigs, certificates) go in a folder the test shares
with it: mounted read-only at the same place in the container, owned by root and readable by the
image's group only, as Kubernetes mounts a Secret with an fsGroup.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import AgentProcess, HubProcess, stop_process

IMAGE_ENV = "SCALE_AGENT_E2E_IMAGE"
ROOTFS_ENV = "SCALE_AGENT_E2E_IMAGE_ROOTFS"
RUNNER_ENV = "SCALE_AGENT_E2E_IMAGE_RUNNER"


@dataclass
class ContainerImage:
    """The image and how this machine runs it."""

    runner: str  # "podman" or "chroot"
    name: str | None = None
    rootfs: Path | None = None
    runtime: str | None = None  # podman's --runtime, when its default does not work here
    _config: dict | None = field(default=None, repr=False)
    _layers: dict[str, Path] = field(default_factory=dict, repr=False)  # chroot: each process's own

    @property
    def config(self) -> dict:
        """The image's configuration: User, Entrypoint, Cmd, Env, WorkingDir, ExposedPorts, Labels."""
        if self._config is None:
            if self.rootfs is not None and (self.rootfs.parent / "image-config.json").is_file():
                doc = json.loads((self.rootfs.parent / "image-config.json").read_text())
            else:
                out = subprocess.run(
                    ["podman", "image", "inspect", str(self.name)], capture_output=True, text=True, check=True
                ).stdout
                doc = {"config": json.loads(out)[0]["Config"]}
            self._config = doc["config"]
        return self._config

    def user(self) -> tuple[int, int]:
        uid, _, gid = self.config["User"].partition(":")
        return int(uid), int(gid or uid)

    def command(
        self,
        args: list[str],
        *,
        shares: Sequence[Path] = (),
        name: str,
        entrypoint: str | None = None,
        user: str | None = None,
        read_only: bool = False,
    ) -> list[str]:
        """The command line that runs `args` in the image (after its entry point, or `entrypoint`),
        as the image's user (or `user`, "UID:GID"); `read_only`: on a read-only root filesystem
        with nothing writable mounted (Kubernetes' readOnlyRootFilesystem)."""
        if self.runner == "podman":
            nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
            pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
            nofile = 1048576 if nofile == resource.RLIM_INFINITY else nofile
            nproc = pid_max if nproc == resource.RLIM_INFINITY else min(nproc, pid_max)
            cmd = ["podman", *(["--runtime", self.runtime] if self.runtime else []), "run", "--rm", "--name", name]
            # The host's network (the tests' loopback), and the host's limits: podman would raise
            # them, which sandboxes may refuse.
            cmd += ["--network", "host", "--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]
            for share in shares:
                cmd += ["--volume", f"{share}:{share}:ro"]
            if entrypoint:
                cmd += ["--entrypoint", entrypoint]
            if user:
                cmd += ["--user", user]
            if read_only:
                cmd += ["--read-only", "--read-only-tmpfs=false"]
            return [*cmd, str(self.name), *args]
        return self._chroot_command(args, shares, entrypoint, user, name, read_only)

    def _chroot_command(
        self,
        args: list[str],
        shares: Sequence[Path],
        entrypoint: str | None,
        user: str | None,
        name: str,
        read_only: bool,
    ) -> list[str]:
        """unshare (a private mount namespace: what it mounts goes when the process ends), the
        image's rootfs under a writable layer of the process's own (overlayfs: as a container, each
        process starts from the image and what it writes goes with it), then chroot as the image's
        user. Every step execs the next, so the Popen's pid is the program's."""
        layer = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.rootfs.parent.parent if self.rootfs else None))
        self._layers[name] = layer
        for d in ("upper", "work", "root"):
            (layer / d).mkdir()
        root = str(layer / "root")
        uid, gid = self.user()
        if user:
            uid_text, _, gid_text = user.partition(":")
            uid, gid = int(uid_text), int(gid_text or uid_text)
        cfg = self.config
        q = shlex.quote
        options = f"lowerdir={self.rootfs},upperdir={layer / 'upper'},workdir={layer / 'work'}"
        mounts = [
            f"mount -t overlay overlay -o {q(options)} {q(root)}",
            f"mount -t proc proc {q(root)}/proc",
            f"mount --rbind /dev {q(root)}/dev",
        ]
        for share in shares:
            mounts.append(f"mkdir -p {q(root + str(share))}")
            mounts.append(f"mount --bind -o ro {q(str(share))} {q(root + str(share))}")
        if read_only:
            mounts.append(f"mount -o remount,ro {q(root)}")
        program = [entrypoint] if entrypoint else list(cfg.get("Entrypoint") or [])
        if not args and not entrypoint:  # as a runtime does: the image's command when none is given
            args = list(cfg.get("Cmd") or [])
        inner = [
            "chroot",
            f"--userspec={uid}:{gid}",
            f"--groups={gid}",
            root,
            "/usr/bin/env",
            "-i",
            "-C",
            cfg.get("WorkingDir") or "/",
            *cfg.get("Env", []),
            *program,
            *args,
        ]
        script = " && ".join([*mounts, "exec " + shlex.join(inner)])
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script]

    def run(
        self,
        args: list[str],
        *,
        shares: Sequence[Path] = (),
        entrypoint: str | None = None,
        user: str | None = None,
        read_only: bool = False,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess:
        """Run to completion: the CompletedProcess (text)."""
        name = f"scale-agent-test-{uuid.uuid4().hex[:10]}"
        try:
            return subprocess.run(
                self.command(args, shares=shares, name=name, entrypoint=entrypoint, user=user, read_only=read_only),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        finally:
            self.cleanup(name)

    def cleanup(self, name: str) -> None:
        """What is left of a process that ended: its container, or its writable layer."""
        if self.runner == "podman":
            subprocess.run(["podman", "rm", "--force", "--ignore", name], capture_output=True, timeout=60)
        layer = self._layers.pop(name, None)
        if layer is not None:
            shutil.rmtree(layer, ignore_errors=True)

    def pid_of(self, proc: subprocess.Popen, name: str, timeout: float = 60.0) -> int:
        """The host pid of the image's process (for /proc/<pid>/status)."""
        if self.runner != "podman":
            return proc.pid
        deadline = time.monotonic() + timeout
        while True:
            out = subprocess.run(
                ["podman", "inspect", "--format", "{{.State.Pid}}", name], capture_output=True, text=True, timeout=30
            ).stdout.strip()
            if out.isdigit() and int(out) > 0:
                return int(out)
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"container {name} did not start (podman run exited {proc.poll()})")
            time.sleep(0.1)  # polling podman for the container's state, with a deadline


def image_from_env() -> ContainerImage | None:
    """The image the environment names, or None."""
    name = os.environ.get(IMAGE_ENV) or None
    rootfs = os.environ.get(ROOTFS_ENV) or None
    runner = (os.environ.get(RUNNER_ENV) or ("podman" if name else "chroot")).split()
    if runner[0] == "podman" and name:
        runtime = next((w.split("=", 1)[1] for w in runner[1:] if w.startswith("runtime=")), None)
        return ContainerImage("podman", name=name, rootfs=Path(rootfs) if rootfs else None, runtime=runtime)
    if runner[0] == "chroot" and rootfs and Path(rootfs).is_dir():
        return ContainerImage("chroot", name=name, rootfs=Path(rootfs))
    return None


def share_dir(directory: Path, gid: int) -> Path:
    """A folder to hand files to the image's processes: root's, readable by group `gid` only."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chown(directory, 0, gid)
    directory.chmod(0o750)
    return directory


def share(directory: Path, source: Path, name: str | None = None) -> Path:
    """Copy `source` into the shared folder, readable by its group only (mode 0440)."""
    target = directory / (name or source.name)
    shutil.copyfile(source, target)
    os.chown(target, 0, directory.stat().st_gid)
    target.chmod(0o440)
    return target


def status_ids(pid: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(real, effective, saved, filesystem) uids and gids of a process, from /proc/<pid>/status."""
    text = Path(f"/proc/{pid}/status").read_text()
    uids = re.search(r"^Uid:\s+(.+)$", text, re.M)
    gids = re.search(r"^Gid:\s+(.+)$", text, re.M)
    assert uids and gids, text
    return tuple(int(x) for x in uids.group(1).split()), tuple(int(x) for x in gids.group(1).split())


class ImageHub(HubProcess):
    """`scale-agent hub` run from the image (its log collected, its HTTP API at hand)."""

    def __init__(self, image: ContainerImage, config: Path, shares: Sequence[Path], *args: str) -> None:
        self.image = image
        self.name = f"scale-agent-hub-{uuid.uuid4().hex[:10]}"
        self.proc = subprocess.Popen(
            image.command(
                ["--log-level", "DEBUG", "hub", "--config", str(config), *args], shares=shares, name=self.name
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.log: list[str] = []
        self._new = threading.Condition()
        threading.Thread(target=self._read_log, daemon=True).start()
        try:
            line = self.wait_log(r"gRPC on \S+, HTTP on https?://", 90, "the hub's start line")
        except BaseException:
            self.stop()
            raise
        m = re.search(r"gRPC on (\S+), HTTP on (https?://\S+)", line)
        assert m, line
        self.grpc_target, self.url = m.group(1), m.group(2)
        self.grpc_port = int(self.grpc_target.rsplit(":", 1)[1])

    @property
    def pid(self) -> int:
        return self.image.pid_of(self.proc, self.name)

    def stop(self) -> int:
        try:
            return stop_process(self.proc)
        finally:
            self.image.cleanup(self.name)


class ImageAgent(AgentProcess):
    """`scale-agent agent` run from the image, its log collected as it arrives."""

    def __init__(self, image: ContainerImage, config: Path, shares: Sequence[Path], *, read_only: bool = False) -> None:
        self.image = image
        self.name = f"scale-agent-agent-{uuid.uuid4().hex[:10]}"
        self._json = json
        self.proc = subprocess.Popen(
            image.command(
                ["--log-level", "DEBUG", "agent", "--config", str(config)],
                shares=shares,
                name=self.name,
                read_only=read_only,
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.events: list[dict] = []
        self.stderr: list[str] = []
        self._new = threading.Condition()
        threading.Thread(target=self._read_events, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.image.pid_of(self.proc, self.name)

    def stop(self) -> int:
        try:
            return stop_process(self.proc)
        finally:
            self.image.cleanup(self.name)
