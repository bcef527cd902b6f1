#!/usr/bin/env python3
"""Checks the layer table of docs/development.md ("Layers") against the crates'
manifests, as `cargo metadata` reads them: every dependency of ours (normal or build;
dev-dependencies are for tests) must be a crate the crate's row lists in "may depend
on", of a lower row, and no state crate of another folder; `testkit` is never one;
every crate of the workspace has a row (`testkit` aside). Prints each finding and exits
1 if there is one.

    scripts/check_layers.py              check the repo
    scripts/check_layers.py --self-test  plant a dependency of cells/state on rpc (and
                                         one on testkit) and require both refused

Run from the repo root (scripts/test.sh does).
"""
import json
import os
import re
import subprocess
import sys

DOC = "docs/development.md"
TEST_ONLY = "testkit"


def table(doc: str) -> list:
    """The layer table's rows, bottom first: (crate folders, allowed folders or None for
    anything)."""
    text = open(doc).read()
    section = text[text.index("### Layers"):]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| layer") or line.startswith("|---"):
            if rows and not line.startswith("|"):
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        crates = re.findall(r"`([a-z/]+)`", cells[1])
        allowed = None if cells[2].startswith("anything") else set(re.findall(r"`([a-z/]+)`", cells[2]))
        rows.append((crates, allowed))
    return rows


def workspace() -> dict:
    """folder -> (package name, [folders of the workspace crates it depends on, not for tests])."""
    meta = json.loads(subprocess.run(["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
                                     stdout=subprocess.PIPE, text=True, check=True).stdout)
    root = meta["workspace_root"]
    folder = {p["name"]: os.path.relpath(os.path.dirname(p["manifest_path"]), root) for p in meta["packages"]}
    return {folder[p["name"]]: (p["name"], sorted({folder[d["name"]] for d in p["dependencies"] if d["name"] in folder and d["kind"] in (None, "build")}))
            for p in meta["packages"]}


def findings(rows: list, crates: dict) -> list:
    found = []
    row_of = {c: i for i, (cs, _) in enumerate(rows) for c in cs if c in crates}
    for folder, (name, deps) in sorted(crates.items()):
        if folder == TEST_ONLY:
            continue
        if folder not in row_of:
            found.append(f"{folder} ({name}) has no row in the layer table of {DOC}")
            continue
        row = row_of[folder]
        allowed = rows[row][1]
        for dep in deps:
            if dep == TEST_ONLY:
                found.append(f"{folder} depends on {TEST_ONLY}, which is for tests only")
            elif dep not in row_of:
                found.append(f"{folder} depends on {dep}, which has no row")
            elif row_of[dep] >= row:
                found.append(f"{folder} depends on {dep}, of the same or a higher layer")
            elif allowed is not None and dep not in allowed:
                found.append(f"{folder} depends on {dep}, which its row ({', '.join(rows[row][0])}) does not list")
            elif dep.endswith("/state") and allowed is not None and os.path.dirname(dep) != os.path.dirname(folder) and os.path.dirname(folder):
                found.append(f"{folder} depends on {dep}, another folder's state crate")
    return found


def main() -> int:
    rows, crates = table(DOC), workspace()
    if sys.argv[1:] == ["--self-test"]:
        planted = dict(crates)
        name, deps = planted["cells/state"]
        planted["cells/state"] = (name, deps + ["rpc", TEST_ONLY])
        name, deps = planted["cells/server"]
        planted["cells/server"] = (name, deps + ["registry/state"])
        got = findings(rows, planted)
        want = ["cells/state depends on rpc", f"cells/state depends on {TEST_ONLY}", "cells/server depends on registry/state"]
        missed = [w for w in want if not any(f.startswith(w) for f in got)]
        if missed or findings(rows, crates):
            print(f"layers: the self-test failed: missed {missed}; findings {got}")
            return 1
        print(f"layers: self-test ok ({len(got)} planted dependencies refused)")
        return 0
    found = findings(rows, crates)
    for f in found:
        print(f"layers: {f}")
    if found:
        return 1
    print(f"layers: ok ({len(crates)} crates, {len(rows)} layers of {DOC})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
