"""Three hub replicas on one database, each listing the others (`replicas.cluster: static`), for
the drills that need replicas: a failover, or a request received by one replica and carried out
by another."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import HubProcess, free_port, write_yaml

NAMES = ("hub-a", "hub-b", "hub-c")


def start_replicas(directory: Path, database_url: str, **config: object) -> dict[str, HubProcess]:
    """hub-a, hub-b and hub-c, each with `config` added to its file, once each sees the others."""
    ports = {name: free_port() for name in NAMES}
    hubs: dict[str, HubProcess] = {}
    try:
        for name in NAMES:
            doc = {
                **config,
                "server": {"grpcPort": 0, "httpPort": ports[name], "replicaName": name, **config.get("server", {})},  # type: ignore[dict-item]
                "database": {"url": database_url},
                "replicas": {
                    "cluster": "static",
                    "heartbeat": {"periodSeconds": 1, "missedPeriods": 3},
                    "static": [{"id": n, "baseUrl": f"http://127.0.0.1:{ports[n]}"} for n in NAMES if n != name],
                },
            }
            hubs[name] = HubProcess(write_yaml(directory / f"{name}.yaml", doc))
        for hub in hubs.values():
            hub.wait_until(
                "/armory/clouddrivers",
                lambda d: sorted(p["id"] for p in d if p["ready"]) == list(NAMES),
                what="three ready replicas",
            )
    except BaseException:
        stop(hubs)
        raise
    return hubs


def stop(hubs: dict[str, HubProcess]) -> None:
    for hub in hubs.values():
        if hub.proc.poll() is None:
            hub.stop()
