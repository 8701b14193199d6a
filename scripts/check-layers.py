#!/usr/bin/env python3
"""Checks the layering of src/ (src/CMakeLists.txt): each folder includes
internal headers only from itself and the folders below it, and the
clients (the command line, src/cli/, and the Python bindings, python/src/)
only public headers. Tests (*_test.cc, *_test_util.h) may reach any
internal header below the command line. Exits 1, naming every include that
breaks the order.

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
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def is_test(path):
    name = path.name
    return name.endswith("_test.cc") or name.endswith("_test_util.h")


def problems(root):
    out = []
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
            if first in ("relpos", "hwy", "support") or "/" not in header:
                continue  # public, Highway's, test support, same folder
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
            if "/" in header and header.split("/")[0] != "relpos":
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
