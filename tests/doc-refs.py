#!/usr/bin/env python3
"""Fails when a document names a file, a constant or a test that does not exist.

Docs drift from code one rename at a time. This check reads every `code span` in README.md,
docs/*.md and the crates' and tools' README/markdown files, and checks three kinds of names
against the tracked tree (git ls-files):

* a path (`crates/driver/src/ring.rs`, `tests/qemu/cases/bind.sh`, `ring.rs`): a path with a
  slash must exist relative to the repository root (or, for `src/...`, `tests/...` or
  `cases/...`, below some crate, tool or test directory); a bare file name must be the name
  of some tracked file;
* a constant (`IDLE_POLLS_PER_CLOCK_CHECK`, `NVME_ERR_TRANSPORT`): an UPPER_SNAKE name must
  occur in some tracked source file (Rust, C, shell, Python, TOML, the C header), comments
  included, so a kernel or spec name we cite in code passes as well;
* a test (`item1_timed_out_command_keeps_slot_and_prp_page_until_late_completion`,
  `recovery::reset_brings_a_failed_controller_back`): a snake_case name with at least three
  underscores (the last `::` segment) must be defined as `fn NAME` somewhere; written without
  a `::` path it may instead be any identifier of the tree (a report field, a bench id, a
  kernel parameter the scripts write).

Names from outside the tree that docs legitimately mention (environment variables of other
tools, fio options, kernel config names) are listed in ALLOWED below; keep that list short.
Exit status 1 with one line per dangling name, 0 when everything resolves.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Names that are not ours and need not occur in the tree.
ALLOWED = {
    "PROPTEST_CASES",  # proptest's own knob
    "RUST_LOG",  # env_logger
    "RUSTFLAGS",
    "CARGO_TARGET_DIR",
    "LD_LIBRARY_PATH",
    "O_DIRECT",
    "O_EXCL",
    "PRAGMA",
    "READ_FIXED",  # io_uring opcodes (the io-uring crate spells them ReadFixed / WriteFixed)
    "WRITE_FIXED",
    "SQLITE_ENABLE_ATOMIC_WRITE",  # a SQLite compile-time option
    "scripts/kconfig/merge_config.sh",  # in the Linux source tree
}

CODE_SPAN = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^[A-Za-z0-9_.\-/]+\.(rs|sh|py|toml|h|c|txt|json|md|config)$")
CONST = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$")
TEST = re.compile(r"^(?:[a-z0-9_]+::)*([a-z][a-z0-9]*(?:_[a-z0-9]+){3,})(?:\(\))?$")
SOURCE_EXT = (".rs", ".c", ".h", ".sh", ".py", ".toml", ".config", ".txt")


def tracked():
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [p for p in out.splitlines() if not p.startswith("target/")]


def main():
    files = tracked()
    file_set = set(files)
    basenames = {os.path.basename(p) for p in files}
    dirs = {os.path.dirname(p) for p in files}
    for d in list(dirs):
        while d:
            d = os.path.dirname(d)
            dirs.add(d)
    docs = [
        p
        for p in files
        if p.endswith(".md")
        and (p == "README.md" or p.startswith("docs/") or p.startswith(("crates/", "tools/")))
        and os.path.exists(os.path.join(ROOT, p))
    ]

    sources = []
    for p in files:
        if p.endswith(SOURCE_EXT) and os.path.exists(os.path.join(ROOT, p)):
            with open(os.path.join(ROOT, p), encoding="utf-8", errors="replace") as f:
                sources.append(f.read())
    corpus = "\n".join(sources)
    fns = set(re.findall(r"\bfn\s+([a-z_][a-z0-9_]*)", corpus))
    words = set(re.findall(r"\b[A-Z][A-Z0-9_]*\b", corpus))
    idents = set(re.findall(r"\b[a-z_][a-z0-9_]*\b", corpus))

    def path_exists(name):
        name = name.strip("./") if name.startswith("./") else name
        if "/" not in name:
            return name in basenames
        if name in file_set or name.rstrip("/") in dirs:
            return True
        # `src/foo.rs`, `tests/bar.rs`, `cases/x.sh`: relative to some crate or test dir.
        return any(p.endswith("/" + name) for p in files)

    problems = []
    for doc in docs:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        # Fenced blocks hold commands and output, not references.
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for lineno, line in enumerate(text.splitlines(), 1):
            for span in CODE_SPAN.findall(line):
                token = span.strip()
                if " " in token or "*" in token or "<" in token or "{" in token:
                    continue
                if token in ALLOWED:
                    continue
                if PATH.match(token) and not token.startswith(("http", "/")):
                    if not path_exists(token):
                        problems.append(f"{doc}: file `{token}` does not exist")
                elif CONST.match(token):
                    if token not in words:
                        problems.append(f"{doc}: constant `{token}` occurs in no source file")
                else:
                    m = TEST.match(token)
                    # A test name must be a function; other long snake_case names (report
                    # fields, kernel parameters, bench ids) must at least occur in the tree.
                    name = m.group(1) if m else None
                    if name and name not in fns and ("::" in token or name not in idents):
                        problems.append(f"{doc}: `{token}`: no `fn {name}` in the tree")
    for p in problems:
        print(p)
    if problems:
        print(f"doc-refs: {len(problems)} dangling name(s) in {len(docs)} documents")
        return 1
    print(f"doc-refs: every file, constant and test named in {len(docs)} documents exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
