#!/usr/bin/env python3
"""Checks the layering of src/ (src/CMakeLists.txt): each folder includes
internal headers only from itself and the folders below it, and the
clients (the command line, src/cli/, and the Python bindings, python/src/)
only public headers. The public headers mirror the layers
(include/relpos/*.h is the op's, include/relpos/<layer>/ that layer's): a
folder of src/, and a folder of include/relpos/, includes public headers
only of its own layer and those below it, and nothing includes the old
paths kept for users (FORWARDERS). Tests (*_test.cc, *_test_util.h) may
reach any internal header below the command line. Exits 1, naming every
include that breaks the order.

    python3 scripts/check-layers.py [REPOSITORY_ROOT]
"""
import pathlib
import re
import sys

# Bottom to top.
LAYERS = ["base", "op", "data", "model", "train", "lab", "cli"]
# The first folder of an internal include ("base/check.h") names its layer;
# the op's internal headers are included from src/op/ ("core/gemm.h").
PREFIX_LAYER = {"base": "base", "core": "op", "kernels": "op",
                "reference": "op", "data": "data", "model": "model",
                "train": "train", "lab": "lab", "cli": "cli"}
# Old public paths that only include the header's new home, kept so that
# users' includes compile; the project itself uses the new paths.
FORWARDERS = {"relpos/lab/batch.h", "relpos/lab/metrics.h",
              "relpos/lab/parallel_text.h"}
# Top-level public headers outside the op's layer: the error types every
# layer throws (base/check.h raises them), and the umbrella over them all.
PUBLIC_LAYER = {"relpos/error.h": "base", "relpos/relpos.h": "cli"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def is_test(path):
    name = path.name
    return name.endswith("_test.cc") or name.endswith("_test_util.h")


def public_layer(header):
    """The layer of public header "relpos/..." (the op for the top level)."""
    if header in PUBLIC_LAYER:
        return PUBLIC_LAYER[header]
    parts = header.split("/")
    if len(parts) == 2:
        return "op"
    return parts[1] if parts[1] in LAYERS else None


def public_problem(where, rank, header):
    """Why `where` (in the layer of rank `rank`) may not include public
    `header`, or None."""
    if header in FORWARDERS:
        return (f"{where}: includes \"{header}\", an old path kept for "
                f"users (include its new home)")
    target = public_layer(header)
    if target is None:
        return f"{where}: includes \"{header}\", which is in no layer"
    if LAYERS.index(target) > rank:
        return (f"{where}: includes the public \"{header}\" of {target}/, "
                f"a layer above it")
    return None


def problems(root):
    out = []
    # The public headers, folder by folder.
    inc = root / "include" / "relpos"
    for path in sorted(inc.rglob("*.h*")):
        rel = "relpos/" + path.relative_to(inc).as_posix()
        if rel in FORWARDERS:
            continue
        layer = public_layer(rel)
        if layer is None:
            out.append(f"{path.relative_to(root)}: folder is not a layer")
            continue
        for header in INCLUDE.findall(path.read_text(encoding="utf-8")):
            if header.split("/")[0] != "relpos":
                continue
            why = public_problem(path.relative_to(root), LAYERS.index(layer),
                                 header)
            if why:
                out.append(why)
    src = root / "src"
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".cc", ".h"):
            continue
        layer = path.relative_to(src).parts[0]
        if layer not in LAYERS:
            out.append(f"{path.relative_to(root)}: folder {layer}/ is not a "
                       f"layer of src/CMakeLists.txt")
            continue
        rank = LAYERS.index(layer)
        for header in INCLUDE.findall(path.read_text(encoding="utf-8")):
            first = header.split("/")[0]
            if first == "relpos":
                why = public_problem(path.relative_to(root),
                                     len(LAYERS) if is_test(path) else rank,
                                     header)
                if why and (header in FORWARDERS or not is_test(path)):
                    out.append(why)
                continue
            if first in ("hwy", "support") or "/" not in header:
                continue  # Highway's, test support, same folder
            target = PREFIX_LAYER.get(first)
            if target is None:
                out.append(f"{path.relative_to(root)}: includes \"{header}\","
                           f" which is in no layer")
            elif layer == "cli" and not is_test(path) and target != "cli":
                out.append(f"{path.relative_to(root)}: the command line "
                           f"includes the internal \"{header}\" (public "
                           f"headers only)")
            elif LAYERS.index(target) > rank and not (
                    is_test(path) and target != "cli"):
                out.append(f"{path.relative_to(root)}: {layer}/ includes "
                           f"\"{header}\" from {target}/, a layer above it")
    # The Python bindings: public headers and their own files only.
    for path in sorted((root / "python" / "src").glob("*")):
        if path.suffix not in (".cc", ".h"):
            continue
        for header in INCLUDE.findall(path.read_text(encoding="utf-8")):
            if header in FORWARDERS:
                out.append(f"{path.relative_to(root)}: includes \"{header}\","
                           f" an old path kept for users")
            elif "/" in header and header.split("/")[0] != "relpos":
                out.append(f"{path.relative_to(root)}: the Python bindings "
                           f"include the internal \"{header}\" (public "
                           f"headers only)")
    return out


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                        pathlib.Path(__file__).resolve().parent.parent)
    found = problems(root)
    for line in found:
        print(line)
    if found:
        print(f"check-layers: {len(found)} includes break the order "
              f"{' < '.join(LAYERS)}", file=sys.stderr)
        return 1
    print(f"check-layers: src/ keeps the order {' < '.join(LAYERS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
