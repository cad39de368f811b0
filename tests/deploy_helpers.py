"""The Kustomize manifests of deploy/, rendered and read the way the kubelet would run them.

`kustomizations()` finds every kustomization under deploy/ (a new overlay is covered without
listing it anywhere), `render()` runs `kubectl kustomize` on one, and `Pod` lays out what one
container of a rendered Deployment would see: its mounted ConfigMaps and Secrets as files under a
root folder, its environment with `secretKeyRef`/`configMapKeyRef`/`fieldRef` resolved. Secrets
the manifests leave to the user are supplied by the caller. The configuration files are then
loaded through the product's own loaders, so manifests and code cannot drift apart.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SELECTOR_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")
LABELS = (*SELECTOR_LABELS, "app.kubernetes.io/part-of")


def kustomizations(under: Path = DEPLOY) -> list[Path]:
    """Every folder under `under` holding a kustomization that can be built on its own
    (Components, which only make sense inside another kustomization, are left out)."""
    found = []
    for name in KUSTOMIZATION_FILES:
        for path in under.rglob(name):
            doc = yaml.safe_load(path.read_text()) or {}
            if doc.get("kind", "Kustomization") == "Kustomization":
                found.append(path.parent)
    return sorted(set(found))


def kubectl(*args: str, kubeconfig: Path | None = None, stdin: str | None = None, timeout: float = 120):
    """kubectl, its output captured; a failure raises with kubectl's own words."""
    command = ["kubectl", *(["--kubeconfig", str(kubeconfig)] if kubeconfig else []), *args]
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"{shlex.join(command)} failed ({done.returncode}):\n{done.stderr}{done.stdout}")
    return done


def render(directory: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize DIR`, parsed: the objects it renders, in its order."""
    out = kubectl("kustomize", str(directory)).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def find(objects: Iterable[dict], kind: str, name: str | None = None) -> list[dict]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def only(objects: Iterable[dict], kind: str, name: str | None = None) -> dict:
    matches = find(objects, kind, name)
    assert len(matches) == 1, f"expected one {kind}{' ' + name if name else ''}, found {len(matches)}"
    return matches[0]


def write_overlay(
    directory: Path,
    base: Path,
    *,
    namespace: str,
    name_suffix: str = "",
    secrets: Mapping[str, Mapping[str, str]] | None = None,
    secret_types: Mapping[str, str] | None = None,
    served: set[str] | None = None,
) -> Path:
    """An overlay of `base` (a folder of deploy/) that installs it in `namespace`, with
    `name_suffix` on every name (cluster-scoped names then differ between test runs), and the
    Secrets the manifests leave to the user generated from `secrets` ({name: {key: value}}).

    `served`: the API versions the server serves (`kubectl api-versions`). A PodDisruptionBudget
    is shipped as policy/v1 (Kubernetes 1.21 and later); a server without it (1.20) gets the same
    object as policy/v1beta1, which deploy/hub/base/pdb.yaml tells its users to do.
    """
    directory.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": namespace,
        "resources": [os.path.relpath(base, directory)],
    }
    if name_suffix:
        doc["nameSuffix"] = name_suffix
    generated = []
    for name, data in (secrets or {}).items():
        files = []
        for key, value in data.items():
            file = directory / "secrets" / name / key
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(value)
            files.append(f"{key}={file.relative_to(directory)}")
        entry: dict[str, Any] = {"name": name, "files": files, "options": {"disableNameSuffixHash": True}}
        if secret_types and name in secret_types:
            entry["type"] = secret_types[name]
        generated.append(entry)
    if generated:
        doc["secretGenerator"] = generated
    if served is not None and "policy/v1" not in served:
        doc["patches"] = [
            {
                "target": {"group": "policy", "version": "v1", "kind": "PodDisruptionBudget"},
                "patch": yaml.safe_dump([{"op": "replace", "path": "/apiVersion", "value": "policy/v1beta1"}]),
            }
        ]
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return directory


# --- what a container sees -----------------------------------------------------------------------


def needed_secrets(objects: list[dict]) -> dict[str, set[str]]:
    """The Secrets the rendered Deployments need and the render does not hold: {name: keys}.
    Keys of a Secret mounted whole are not known here (an empty set): the caller knows them."""
    have = {o["metadata"]["name"] for o in find(objects, "Secret")}
    out: dict[str, set[str]] = {}
    for deployment in find(objects, "Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        for container in spec["containers"]:
            for env in container.get("env") or ():
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if ref and not ref.get("optional") and ref["name"] not in have:
                    out.setdefault(ref["name"], set()).add(ref["key"])
        for volume in spec.get("volumes") or ():
            secret = volume.get("secret")
            if secret and not secret.get("optional") and secret["secretName"] not in have:
                out.setdefault(secret["secretName"], set())
    return out


@dataclass
class Pod:
    """One container of a rendered Deployment as the kubelet would start it, under `root`.

    `secrets` supplies the Secrets the render does not hold ({name: {key: value}}). Every
    ConfigMap and Secret volume is written under root + its mountPath, key by key (a missing
    required one is an error, as it is for the kubelet); `env` is the container's environment.
    """

    objects: list[dict]
    deployment: dict
    root: Path
    secrets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    container_name: str | None = None
    env: dict[str, str] = field(init=False)
    mounts: dict[str, Path] = field(init=False)

    def __post_init__(self) -> None:
        spec = self.pod_spec
        self.container = next(
            c for c in spec["containers"] if self.container_name is None or c["name"] == self.container_name
        )
        volumes = {v["name"]: v for v in spec.get("volumes") or ()}
        self.mounts = {}
        for mount in self.container.get("volumeMounts") or ():
            volume = volumes[mount["name"]]
            target = self.host_path(mount["mountPath"])
            target.mkdir(parents=True, exist_ok=True)
            self.mounts[mount["mountPath"]] = target
            for key, value in self._volume_files(volume).items():
                (target / key).write_bytes(value)
        self.env = {e["name"]: self._env_value(e) for e in self.container.get("env") or ()}
        self.env = {k: v for k, v in self.env.items() if v is not None}

    @property
    def pod_spec(self) -> dict:
        return self.deployment["spec"]["template"]["spec"]

    @property
    def namespace(self) -> str:
        return self.deployment["metadata"].get("namespace", "default")

    def host_path(self, path: str) -> Path:
        """Where a path of the container is in this layout."""
        return self.root / path.lstrip("/")

    def rooted(self, text: str) -> str:
        """`text` with every mounted path of the container moved under the root (in one pass:
        the root itself may be under a mounted path, such as /tmp)."""
        prefixes = {m.rstrip("/") + "/": str(p) + "/" for m, p in self.mounts.items()}
        pattern = "|".join(re.escape(m) for m in sorted(prefixes, key=len, reverse=True))
        return re.sub(rf"(?<![\w./-])(?:{pattern})", lambda m: prefixes[m.group(0)], text)

    def _object_data(self, kind: str, name: str) -> dict[str, bytes] | None:
        rendered = find(self.objects, kind, name)
        if rendered:
            obj = rendered[0]
            data = {k: v.encode() for k, v in (obj.get("data") or {}).items()} if kind == "ConfigMap" else {}
            if kind == "Secret":
                data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
                data |= {k: v.encode() for k, v in (obj.get("stringData") or {}).items()}
            return data
        if kind == "Secret" and name in self.secrets:
            return {k: v.encode() for k, v in self.secrets[name].items()}
        return None

    def _volume_files(self, volume: dict) -> dict[str, bytes]:
        for kind, key, name_key in (("ConfigMap", "configMap", "name"), ("Secret", "secret", "secretName")):
            if key in volume:
                source = volume[key]
                data = self._object_data(kind, source[name_key])
                if data is None:
                    assert source.get("optional"), f"volume {volume['name']}: no {kind} {source[name_key]}"
                    return {}
                if source.get("items"):
                    return {item["path"]: data[item["key"]] for item in source["items"]}
                return data
        assert "emptyDir" in volume, f"volume {volume['name']}: a kind of volume this layout does not know"
        return {}

    def _env_value(self, env: dict) -> str | None:
        if "value" in env:
            return str(env["value"])
        source = env.get("valueFrom") or {}
        for kind, key in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
            if key in source:
                ref = source[key]
                data = self._object_data(kind, ref["name"])
                if data is None or ref["key"] not in data:
                    assert ref.get("optional"), f"env {env['name']}: no key {ref['key']} in {kind} {ref['name']}"
                    return None
                return data[ref["key"]].decode()
        if "fieldRef" in source:
            fields = {"metadata.namespace": self.namespace, "metadata.name": "pod-0"}
            return fields[source["fieldRef"]["fieldPath"]]
        raise AssertionError(f"env {env['name']}: a kind of value this layout does not know: {env}")

    def mounted_config(self) -> Path:
        """The `--config FILE` of the container's arguments, as mounted (under the root)."""
        args = [*self.container.get("command", ()), *self.container.get("args", ())]
        path = self.host_path(args[args.index("--config") + 1])
        assert path.is_file(), f"--config {path}: no such file in the container's mounts"
        return path

    def config_file(self) -> Path:
        """The mounted configuration file with the paths it names moved under the root (as
        written, they are the container's), next to it."""
        path = self.mounted_config()
        rooted = path.with_name("rooted-" + path.name)
        rooted.write_text(self.rooted(path.read_text()))
        return rooted

    def rooted_env(self) -> dict[str, str]:
        return {k: self.rooted(v) for k, v in self.env.items()}


def cli_arguments(container: dict) -> list[str]:
    """The container's arguments to the `scale-agent` command (its `command` must be that)."""
    command = container.get("command") or []
    assert command[:1] == ["scale-agent"], f"the container runs {command}, not scale-agent"
    return [*command[1:], *container.get("args", ())]


def _strings(doc: Any) -> Iterable[str]:
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for value in doc.values():
            yield from _strings(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _strings(value)


def secret_files(pod: Pod) -> dict[str, set[str]]:
    """For each Secret mounted whole into the pod, the keys its configuration file reads from it
    (the paths under the Secret's mountPath that the file names: kubeconfigs, TLS files)."""
    volumes = {v["name"]: v for v in pod.pod_spec.get("volumes") or ()}
    out: dict[str, set[str]] = {}
    for value in _strings(yaml.safe_load(pod.mounted_config().read_text())):
        for mount in pod.container.get("volumeMounts") or ():
            prefix = mount["mountPath"].rstrip("/") + "/"
            secret = volumes[mount["name"]].get("secret")
            if secret and value.startswith(prefix):
                out.setdefault(secret["secretName"], set()).add(value[len(prefix) :])
    return out


AGENT_TOKEN = "agent-token-0123456789"
REPLICAS_TOKEN = "replicas-token-0123456789"


def kubeconfig_text(key: str) -> str:
    """A kubeconfig the agent's loader accepts (nothing connects to it)."""
    name = key.split(".")[0]
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": {"server": f"https://{name}.invalid:6443"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": "u"}}],
            "current-context": name,
        }
    )


def user_secrets(
    objects: list[dict],
    deployment: dict,
    scratch: Path,
    *,
    database_url: str = "postgresql+asyncpg://hub:secret@postgres.invalid:5432/scaleagent",
    file_for: Callable[[str], str] | None = None,
) -> dict[str, dict[str, str]]:
    """Values for every Secret the manifests leave to the user, as a user would make them:
    {name: {key: value}}. Keys read through the environment come from the Deployment; files of a
    Secret mounted whole from what the configuration file names under its mount (kubeconfigs,
    TLS). `file_for(key)` gives the content of a kubeconfig file (by default, a placeholder)."""
    import trustme
    from cryptography.fernet import Fernet

    cert = trustme.CA().issue_cert("spin-clouddriver-grpc", "localhost")
    values = {
        "token": AGENT_TOKEN,
        "agent-token": AGENT_TOKEN,
        "replicas-token": REPLICAS_TOKEN,
        "database-url": database_url,
        "encryption-key": Fernet.generate_key().decode(),
        "tls.crt": cert.cert_chain_pems[0].bytes().decode(),
        "tls.key": cert.private_key_pem.bytes().decode(),
    }
    out = {name: {key: values[key] for key in keys} for name, keys in needed_secrets(objects).items()}
    for name, keys in secret_files(Pod(objects, deployment, scratch, secrets=out)).items():
        out[name] = {key: values.get(key) or (file_for or kubeconfig_text)(key) for key in keys}
    return out
