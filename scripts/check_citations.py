#!/usr/bin/env python3
"""Every file of the repo that the docs or the code's comments cite exists.

Cited means: a path that starts at one of the repo's top-level folders and names a
file (`cli/tests/wire_edge.rs`, `docs/runbooks/region-lost.md`, `scripts/test.sh`), in
any Markdown file, or in a Rust, Python, shell, Terraform, proto or TOML file of the
repo; and, in Markdown, every relative link (`[x](registry.md)`, `(runbooks/x.md#y)`),
resolved from the linking file's folder. A path with a placeholder (`<`, `*`, `$`, `{`)
is a pattern, not a citation. Prints each missing one and exits 1 if any.

    scripts/check_citations.py              check the repo
    scripts/check_citations.py --self-test  a planted stale citation must be found

Run from the repo root (scripts/test.sh does).
"""
import os
import re
import subprocess
import sys

SOURCES = (".md", ".rs", ".py", ".sh", ".tf", ".proto", ".toml", ".yml", ".yaml")
FILE_ENDINGS = ("rs", "md", "py", "sh", "toml", "tf", "proto", "yml", "yaml", "json", "lock", "txt", "sql", "service", "conf", "png")
# A path: a top-level folder, then folders and a file with one of the endings above.
PATH = re.compile(r"(?<![\w./-])((?:\.ci|[a-z][a-z0-9_-]*)/[A-Za-z0-9_./-]*\.(?:" + "|".join(FILE_ENDINGS) + r"))(?![\w/-])")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def tracked() -> list:
    out = subprocess.run(["git", "ls-files"], stdout=subprocess.PIPE, text=True, check=True).stdout
    # This file names stale paths on purpose (its self-test).
    return [f for f in out.splitlines() if (f.endswith(SOURCES) or os.path.basename(f) in ("run",)) and f != "scripts/check_citations.py"]


def missing(files: list, read=lambda f: open(f, errors="replace").read()) -> list:
    top = {p.split("/", 1)[0] for p in files if "/" in p} | {d for d in os.listdir(".") if os.path.isdir(d)}
    top.discard(".git")
    found = []
    for f in files:
        text = read(f)
        for n, line in enumerate(text.splitlines(), 1):
            for m in PATH.finditer(line):
                path = m.group(1).rstrip(".")
                if path.split("/", 1)[0] not in top or any(c in line[max(0, m.start() - 1):m.end() + 1] for c in "<*${"):
                    continue
                if not os.path.exists(path) and not os.path.exists(os.path.join(os.path.dirname(f), path)):
                    found.append(f"{f}:{n}: {path}")
            if f.endswith(".md"):
                for m in LINK.finditer(line):
                    target = m.group(1)
                    if re.match(r"^[a-z]+:", target) or target.startswith(("/", "<")):
                        continue
                    if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(f), target))):
                        found.append(f"{f}:{n}: link {target}")
    return found


def main() -> int:
    files = tracked()
    if sys.argv[1:] == ["--self-test"]:
        planted = {"docs/planted.md": "see `cli/tests/wire_edge.rs` and [the runbooks](runbooks.md)\n"}
        got = missing(list(planted), read=lambda f: planted[f])
        want = ["docs/planted.md:1: cli/tests/wire_edge.rs", "docs/planted.md:1: link runbooks.md"]
        if got != want:
            print(f"citations: the self-test failed: found {got}, want {want}")
            return 1
        print("citations: self-test ok (a stale path and a stale link found)")
        return 0
    found = missing(files)
    for f in found:
        print(f"citations: missing: {f}")
    if found:
        return 1
    print(f"citations: ok ({len(files)} files read)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
