#!/usr/bin/python3
"""The tree stays a product: checks what a review found wrong once and must not come back.
   check_tree.py REPO_ROOT
 1. No work-session or issue numbers in tracked files outside the lab folder (scripts/lab/):
    comments say what was measured and why, and git history keeps the story.
 2. No product file (libdiag/, hooks/, analyzers/, tools/, python/, examples/, cmake/) names the
    lab folder: the product never depends on the experiments.
 3. Every document a source file, script or doc names (a path ending in .md) exists in the tree.
 4. Size: tracked files <= 30 MB in all, tests/fixtures/ <= 26 MB (the GPU machine carries at
    most 64 MiB of working tree).
 5. Tests spell Catch2's Approx as Catch::Approx (Catch2 3.x, on the GPU machine, has no bare
    Approx; tests/catch_compat.hpp gives 2.13 the same name).
Exit 1 with one line per violation."""
import os
import re
import subprocess
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else "."
LAB = "scripts/lab/"
PRODUCT = ("libdiag/", "hooks/", "analyzers/", "tools/", "python/", "examples/", "cmake/")
TEXT_EXT = (".cpp", ".hpp", ".h", ".cu", ".cuh", ".py", ".sh", ".md", ".txt", ".cmake", ".in", ".json", "")
# Built from parts so that this file does not match itself.
NUMBERED = re.compile(r"\b(" + "sess" + r"ions?|" + "iss" + r"ues?)[ -]#?[0-9]+\b", re.I)
DOC_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.md)\b")
BARE_APPROX = re.compile(r"(?<![\w:])Approx\(")
TREE_LIMIT, FIXTURE_LIMIT = 30_000_000, 26_000_000


def tracked():
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p and os.path.exists(os.path.join(ROOT, p))]


def text_of(path):
    if not path.endswith(TEXT_EXT) and "." in os.path.basename(path):
        return None
    try:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            return f.read()
    except (UnicodeDecodeError, IsADirectoryError):
        return None


def main():
    files = tracked()
    names = {os.path.basename(p) for p in files}
    paths = set(files)
    problems = []
    for p in files:
        text = text_of(p)
        if text is None:
            continue
        here = os.path.dirname(p)
        for n, line in enumerate(text.splitlines(), 1):
            if not p.startswith(LAB) and NUMBERED.search(line):
                problems.append(f"{p}:{n}: names a work session or issue: {line.strip()[:120]}")
            if p.startswith(PRODUCT) and LAB.rstrip("/") in line:
                problems.append(f"{p}:{n}: a product file names the lab folder {LAB}")
            if p.startswith("tests/") and p.endswith((".cpp", ".hpp")) and BARE_APPROX.search(line):
                problems.append(f"{p}:{n}: bare Approx( (Catch2 3.x needs Catch::Approx)")
            for m in DOC_PATH.finditer(line):
                doc = m.group(1)
                if "/" in doc:  # on disk: a copy of the tree without its git index (the GPU machine's) holds the files too
                    ok = any(os.path.normpath(c) in paths or os.path.isfile(os.path.join(ROOT, os.path.normpath(c)))
                             for c in (doc, os.path.join(here, doc), os.path.join("docs", doc)))
                else:
                    ok = doc in names
                if not ok and not doc.startswith(("http", "www.")):
                    problems.append(f"{p}:{n}: names {doc}, which is not in the tree")
    total = sum(os.path.getsize(os.path.join(ROOT, p)) for p in files)
    fixtures = sum(os.path.getsize(os.path.join(ROOT, p)) for p in files if p.startswith("tests/fixtures/"))
    if total > TREE_LIMIT:
        problems.append(f"tracked files are {total / 1e6:.1f} MB, over {TREE_LIMIT / 1e6:.0f} MB")
    if fixtures > FIXTURE_LIMIT:
        problems.append(f"tests/fixtures is {fixtures / 1e6:.1f} MB, over {FIXTURE_LIMIT / 1e6:.0f} MB")
    for line in problems:
        print(line)
    print(f"tree hygiene: {len(files)} tracked files, {total / 1e6:.1f} MB (fixtures {fixtures / 1e6:.1f} MB); "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
