"""What logins cost on the hub's HTTP API (docs/security.md).

One hub process per configuration, each on its own SQLite file, no agent; the same request
(`GET /api/v1/accounts`, an empty list: what is measured is the request's path through the hub,
not a payload) sent N times in a row over one keep-alive connection, then the median and p99.
The configurations, measured in turns (round robin, a batch at a time) so that a busy moment of
the machine falls on all of them alike:

- `open`: no login (loopback), the baseline;
- `static`: a static token (one SHA-256 and a lookup per request);
- `review`: a Kubernetes token checked by TokenReview against kubesim, answers cached (10 s);
- `review-nocache`: the same with `tokenReview.cacheSeconds: 0`: a TokenReview per request.

    .venv/bin/python bench/hub_auth.py                # 2,000 requests per configuration
    .venv/bin/python bench/hub_auth.py --requests 300 # a quick run
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, percentiles
from processes import Proc

from scaleagent.hub.auth.callers import hash_token

STATIC_TOKEN = "bench-static-token-0123456789abcdef"
BATCH = 100


def start_hub(tmp: Path, name: str, auth: dict, kubeconfig: Path | None) -> tuple[Proc, str]:
    config: dict = {
        "server": {"grpcPort": 0, "httpPort": 0},
        "database": {"url": f"sqlite:///{tmp / (name + '.db')}"},
        "auth": auth,
    }
    if kubeconfig is not None:
        config["kubernetes"] = {"kubeconfigFile": str(kubeconfig)}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    hub = Proc(["hub", "--config", str(path)])
    url = hub.wait_line(r"HTTP on (http://\S+)").group(1)
    return hub, url


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="requests per configuration")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-auth-") as d:
        tmp = Path(d)
        kube = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scaleagent.cli",
                "kubesim",
                "--clusters",
                "1",
                "--kubeconfig-dir",
                str(tmp / "kube"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for line in kube.stdout:  # type: ignore[union-attr]
            if "kubesim: ready" in line:
                break
        # The limited identity's token is a kubesim token: TokenReview knows it.
        limited = yaml.safe_load((tmp / "kube" / "kubesim-0-limited.yaml").read_text())
        review_token = limited["users"][0]["user"]["token"]
        tokens = tmp / "tokens.yaml"
        tokens.write_text(yaml.safe_dump([{"name": "bench", "groups": [], "tokenHash": hash_token(STATIC_TOKEN)}]))
        admin = tmp / "kube" / "kubesim-0.yaml"
        setups = {
            "open": ({}, None, None),
            "static": ({"staticTokensFile": str(tokens)}, None, STATIC_TOKEN),
            "review": ({"tokenReview": {"enabled": True}}, admin, review_token),
            "review-nocache": ({"tokenReview": {"enabled": True, "cacheSeconds": 0}}, admin, review_token),
        }
        hubs: dict[str, tuple[Proc, str, str | None]] = {}
        try:
            for name, (auth, kubeconfig, token) in setups.items():
                proc, url = start_hub(tmp, name, auth, kubeconfig)
                hubs[name] = (proc, url, token)
            times: dict[str, list[float]] = {name: [] for name in hubs}
            sessions = {name: aiohttp.ClientSession() for name in hubs}
            try:
                for name, (_, url, token) in hubs.items():  # warm up: connections, caches
                    headers = {"Authorization": f"Bearer {token}"} if token else {}
                    for _ in range(20):
                        async with sessions[name].get(url + "/api/v1/accounts", headers=headers) as r:
                            assert r.status == 200, (name, r.status, await r.text())
                done = 0
                while done < args.requests:
                    n = min(BATCH, args.requests - done)
                    for name, (_, url, token) in hubs.items():
                        headers = {"Authorization": f"Bearer {token}"} if token else {}
                        for _ in range(n):
                            start = time.perf_counter()
                            async with sessions[name].get(url + "/api/v1/accounts", headers=headers) as r:
                                await r.read()
                            times[name].append((time.perf_counter() - start) * 1000)
                    done += n
            finally:
                for s in sessions.values():
                    await s.close()
        finally:
            for proc, _, _ in hubs.values():
                proc.stop()
            kube.terminate()
            kube.wait(20)
    print(f"hub HTTP logins, {args.requests} requests each ({machine()})")
    base = percentiles(times["open"], 50)[0]
    print(f"{'login':<16}{'median ms':>10}{'p99 ms':>10}{'median / open':>15}")
    for name, xs in times.items():
        p50, p99 = percentiles(xs, 50, 99)
        print(f"{name:<16}{p50:>10.2f}{p99:>10.2f}{p50 / base:>15.2f}")


if __name__ == "__main__":
    asyncio.run(main())
