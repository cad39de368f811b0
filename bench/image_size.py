"""The container image's size (docs/container-image.md): what a registry stores and a node pulls
(the compressed layers), and what the node unpacks (the layers' uncompressed tar streams), for the
image and for its base alone; the difference is what Scale Agent adds.

Each image is exported with `buildah push` to an OCI layout in a temporary folder (gzip layers, as
a registry holds them), and the sizes are read from its manifest and its blobs: no estimate.

    scripts/image build && scripts/image size           # the image scripts/image built, on its base
    .venv/bin/python bench/image_size.py --image localhost/scale-agent:0.1.0 \\
        --base localhost/scale-agent-base:bookworm

Needs buildah and root (scripts/image installs the one and runs as the other).
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Layer:
    digest: str
    compressed: int
    unpacked: int


def export(image: str, layout: Path) -> list[Layer]:
    """The image's layers, in order, from an OCI layout that `buildah push` writes."""
    subprocess.run(
        ["buildah", "push", "--quiet", image, f"oci:{layout}:{image}"], check=True, stdout=subprocess.DEVNULL
    )
    blobs = layout / "blobs" / "sha256"
    index = json.loads((layout / "index.json").read_text())
    ref = next(
        m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == image
    )
    manifest = json.loads((blobs / ref["digest"].split(":", 1)[1]).read_text())
    layers = []
    for entry in manifest["layers"]:
        blob = blobs / entry["digest"].split(":", 1)[1]
        unpacked = 0
        opener = gzip.open if entry["mediaType"].endswith("+gzip") else open
        with opener(blob, "rb") as stream:
            while chunk := stream.read(1 << 20):
                unpacked += len(chunk)
        layers.append(Layer(entry["digest"], entry["size"], unpacked))
    return layers


def mb(n: int) -> str:
    return f"{n / 1e6:7.1f} MB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", required=True, help="the image, in buildah's local storage")
    parser.add_argument("--base", help="its base image, to tell apart what the image adds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="image-size-") as tmp:
        layout = Path(tmp) / "oci"
        image = export(args.image, layout)
        base = export(args.base, layout) if args.base else []
    base_digests = {layer.digest for layer in base}
    if base and [layer.digest for layer in image[: len(base)]] != [layer.digest for layer in base]:
        print(f"note: {args.image} is not built on {args.base} as it is now", file=sys.stderr)
    added = [layer for layer in image if layer.digest not in base_digests]
    rows = [(args.image, image)]
    if base:
        rows += [(f"  its base {args.base}", base), ("  added by Scale Agent", added)]
    width = max(len(name) for name, _ in rows)
    print(f"{'':{width}} {'compressed':>10} {'unpacked':>10} layers")
    for name, layers in rows:
        compressed = sum(layer.compressed for layer in layers)
        unpacked = sum(layer.unpacked for layer in layers)
        print(f"{name:{width}} {mb(compressed):>10} {mb(unpacked):>10} {len(layers):>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
