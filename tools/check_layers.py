#!/usr/bin/env python3
"""check_layers: folio's layers call and include only downward.

    tools/check_layers.py [--src src] [--obj build/obj]

The layers, bottom to top, are the folders of src/ named in LAYERS.  It fails
(exit 1, one line per violation) when:
  - a file includes the header of a layer above its own, or a layer's header
    includes its own layer's or a higher one's (a header includes only the
    layers below), or a layer has other than one header;
  - an object of layer L references a symbol defined by an object of a
    layer above L (nm: undefined symbols against defined ones);
  - a file outside the api layer references the maintenance tick
    (purge_tick, purge_maybe_start_thread): only the API's slow paths and
    the background thread run it.
"""
import argparse
import os
import re
import subprocess
import sys

LAYERS = ["base", "meta", "clear", "page", "obj", "api"]
API_ONLY = {"purge_tick", "purge_maybe_start_thread"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def rank(layer):
    return LAYERS.index(layer)


def check_includes(src, errors):
    header_layer = {}
    for layer in LAYERS:
        hdrs = [f for f in os.listdir(os.path.join(src, layer)) if f.endswith(".h")]
        if len(hdrs) != 1:
            errors.append(f"{src}/{layer}: {len(hdrs)} headers {sorted(hdrs)}, want one per layer")
        for h in hdrs:
            header_layer[h] = layer
    for layer in LAYERS:
        d = os.path.join(src, layer)
        for f in sorted(os.listdir(d)):
            if not f.endswith((".c", ".h")):
                continue
            text = open(os.path.join(d, f), encoding="utf-8").read()
            for inc in INCLUDE.findall(text):
                other = header_layer.get(os.path.basename(inc))
                if other is None:
                    continue  # the public header, or a system one
                bad = rank(other) >= rank(layer) if f.endswith(".h") else rank(other) > rank(layer)
                if bad:
                    errors.append(f"{d}/{f} includes {inc} (layer {other}) from layer {layer}")


def nm(paths, defined):
    """path -> its global symbols defined (or undefined): one nm for all"""
    args = ["nm", "-A", "--defined-only" if defined else "--undefined-only"] + paths
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    syms = {path: set() for path in paths}
    for line in out.splitlines():
        path, _, rest = line.partition(".o:")
        parts = rest.split()
        if len(parts) >= 2 and (not defined or parts[-2] not in ("t", "d", "b", "r", "n")):
            syms[path + ".o"].add(parts[-1])
    return syms


def check_calls(obj, errors):
    objects = []
    for layer in LAYERS:
        d = os.path.join(obj, layer)
        if not os.path.isdir(d):
            errors.append(f"{d}: no objects (build first)")
            continue
        objects += [(layer, os.path.join(d, f)) for f in sorted(os.listdir(d)) if f.endswith(".o")]
    paths = [path for _, path in objects]
    defined, undefined = (nm(paths, True), nm(paths, False)) if paths else ({}, {})
    defined_by = {}
    for layer, path in objects:
        for s in defined[path]:
            defined_by[s] = (layer, path)
    for layer, path in objects:
        for s in sorted(undefined[path]):
            if s in API_ONLY and layer != "api":
                errors.append(f"{path} (layer {layer}) calls {s}: only the api runs the maintenance tick")
            if s not in defined_by:
                continue
            other, where = defined_by[s]
            if rank(other) > rank(layer):
                errors.append(f"{path} (layer {layer}) uses {s} of {where} (layer {other}), above it")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default="src")
    ap.add_argument("--obj", default="build/obj")
    a = ap.parse_args()
    errors = []
    check_includes(a.src, errors)
    check_calls(a.obj, errors)
    for e in errors:
        print("check-layers: " + e)
    if errors:
        print(f"check-layers: {len(errors)} violation(s); layers bottom to top: {' < '.join(LAYERS)}")
        return 1
    print(f"check-layers: ok ({' < '.join(LAYERS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
