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

The command table, `docs/commands.md`, is checked harder, by column (its tables' headings):
in the PCIe and TCP columns every code span is a Rust path whose last segment is a `fn` (lower
case) or an identifier (upper case) of `crates/`, and `Type::fn` a `fn` declared in an
`impl Type` / `impl Trait for Type` / `trait Type` block there; in the C API column a function declared in
`crates/capi/include/nvme_userspace.h`; in the tool column `TOOL WORD...` with `TOOL` a
directory of `tools/` and each word a subcommand (a clap variant in kebab case), an option
(`--long`: a `long = "..."` or a field of that name; `-x`: `short = 'x'`) or a string literal
of that tool's sources; in the test column `FILE::NAME` (a `fn NAME` in a tracked `FILE.rs`),
a bare `NAME` (a `fn` anywhere) or `CASE.sh` (in `tests/qemu/cases/`). And the table must be
complete: every admin and NVM opcode, Fabrics command type, feature and log page identifier of
`crates/spec` (`pub const NAME: u8` in the modules COVERAGE names) has a row, its `NNh` in the
first column of its section. Every run first runs `self_test`, which feeds these checks
made-up names and a table with a row missing, and fails unless each is caught.

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


COMMAND_TABLE = "docs/commands.md"
RUST_PATH = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*::)*[A-Za-z_][A-Za-z0-9_]*(?:\(\))?$")
CAMEL = re.compile(r"[A-Z][a-z0-9]*|[a-z0-9]+")
IMPL_HEAD = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+)?(?:impl\b(?:\s*<[^{]*?>)?\s+(?P<impl>[^{]*)"
    r"|trait\s+(?P<trait>[A-Z][A-Za-z0-9_]*))"
)
FN_HEAD = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+([a-z_]\w*)"
)
STRIP = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'|//.*$')


def impl_names(head):
    """The type and trait names an `impl` heading (`impl<T> Tr for a::Ty<T> where ...`) names."""
    head = re.split(r"\bwhere\b", head)[0]
    names = set()
    for part in re.split(r"\bfor\b", head):
        part = re.sub(r"<.*", "", part.strip())
        if part:
            names.add(part.split("::")[-1].strip("&*() "))
    return {n for n in names if re.match(r"^[A-Z][A-Za-z0-9_]*$", n)}


def methods_by_type(text, into):
    """Adds the `fn`s declared directly in each `impl` and `trait` block of `text` to `into`
    (type or trait name -> fn names). Brace counting after stripping strings and comments:
    grep-level, good enough for rustfmt'd code."""
    depth = 0
    stack = []  # (names, depth outside the block)
    pending = None
    for line in text.splitlines():
        code = STRIP.sub("", line)
        m = IMPL_HEAD.match(code)
        if m:
            head = m.group("impl")
            pending = (impl_names(head) if head is not None else {m.group("trait")}, depth)
        elif stack and depth == stack[-1][1] + 1:
            f = FN_HEAD.match(code)
            if f:
                for n in stack[-1][0]:
                    into.setdefault(n, set()).add(f.group(1))
        for ch in code:
            if ch == "{":
                if pending is not None and depth == pending[1]:
                    stack.append(pending)
                    pending = None
                depth += 1
            elif ch == "}":
                depth -= 1
                if stack and depth == stack[-1][1]:
                    stack.pop()
            elif ch == ";" and pending is not None and depth == pending[1]:
                pending = None  # `impl Trait for T;`-like or a declaration, no block


def kebab(ident):
    """`IdCtrl` -> `id-ctrl`, `zone_append` -> `zone-append` (clap's derive names)."""
    return "-".join(w.lower() for w in CAMEL.findall(ident))


class TableIndex:
    """What the command table's names are checked against, from the tracked tree."""

    def __init__(self, files, read):
        self.fns_by_stem = {}
        self.crate_idents = set()
        self.crate_fns = set()
        self.all_fns = set()
        self.cases = set()
        self.tools = {}
        self.c_functions = set()
        self.methods = {}
        for p in files:
            if p.startswith("tests/qemu/cases/") and p.endswith(".sh"):
                self.cases.add(os.path.basename(p))
            if not p.endswith(".rs") and not p.endswith(".h"):
                continue
            text = read(p)
            if text is None:
                continue
            if p == "crates/capi/include/nvme_userspace.h":
                self.c_functions |= set(re.findall(r"\b(nvme_[a-z0-9_]+)\s*\(", text))
            if not p.endswith(".rs"):
                continue
            fns = set(re.findall(r"\bfn\s+([a-z_][a-z0-9_]*)", text))
            self.all_fns |= fns
            stem = os.path.basename(p)[: -len(".rs")]
            keys = {stem}
            if stem in ("mod", "lib", "main"):
                keys.add(os.path.basename(os.path.dirname(p)))
            for k in keys:
                self.fns_by_stem.setdefault(k, set()).update(fns)
            if p.startswith("crates/"):
                methods_by_type(text, self.methods)
                self.crate_fns |= fns
                self.crate_idents |= set(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", text))
            if p.startswith("tools/"):
                tool = p.split("/")[1]
                t = self.tools.setdefault(
                    tool, {"words": set(), "longs": set(), "shorts": set()}
                )
                t["words"] |= set(re.findall(r'"([a-z0-9][a-z0-9-]*)"', text))
                t["words"] |= {kebab(i) for i in re.findall(r"\b[A-Z][A-Za-z0-9]*\b", text)}
                t["longs"] |= set(re.findall(r'long\s*=\s*"([a-z0-9-]+)"', text))
                t["longs"] |= {
                    f.replace("_", "-")
                    for f in re.findall(r"\b(?:pub\s+)?([a-z_][a-z0-9_]*)\s*:", text)
                }
                t["shorts"] |= set(re.findall(r"short\s*=\s*'([A-Za-z0-9])'", text))


def check_table_span(column, span, idx):
    """None when `span` names something that exists for its column, else why not."""
    if column in ("pcie", "tcp"):
        if not RUST_PATH.match(span):
            return "not a Rust path"
        segments = span.rstrip("()").split("::")
        last = segments[-1]
        owner = segments[-2] if len(segments) > 1 else None
        if last[0].islower():
            if last not in idx.crate_fns:
                return f"no `fn {last}` in crates/"
            if owner and owner[0].isupper():
                if owner not in idx.methods:
                    return f"no `impl {owner}` or `trait {owner}` in crates/"
                if last not in idx.methods[owner]:
                    return f"no `fn {last}` in an `impl {owner}` or `trait {owner}` block"
        elif last not in idx.crate_idents:
            return f"`{last}` occurs nowhere in crates/"
        return None
    if column == "c":
        if span.rstrip("()") not in idx.c_functions:
            return "not a function of crates/capi/include/nvme_userspace.h"
        return None
    if column == "tool":
        words = span.split()
        tool = idx.tools.get(words[0])
        if tool is None:
            return f"`{words[0]}` is not a tool of tools/"
        for w in words[1:]:
            if w.startswith("--"):
                ok = w[2:] in tool["longs"]
            elif w.startswith("-"):
                ok = w[1:] in tool["shorts"]
            else:
                ok = w in tool["words"]
            if not ok:
                return f"`{w}` is no subcommand, option or value of {words[0]}"
        return None
    if column == "test":
        if span.endswith(".sh"):
            return None if span in idx.cases else "no such case in tests/qemu/cases/"
        parts = span.rstrip("()").split("::")
        if not all(re.match(r"^[a-z_][a-z0-9_]*$", x) for x in parts):
            return "not a test name (FILE::NAME, NAME or CASE.sh)"
        if len(parts) == 1:
            return None if parts[0] in idx.all_fns else f"no `fn {parts[0]}` in the tree"
        stem, name = parts[-2], parts[-1]
        if name not in idx.fns_by_stem.get(stem, set()):
            return f"no `fn {name}` in a file `{stem}.rs`"
        return None
    return None


def table_columns(header):
    """The checked column of each cell of a table heading, by its text."""
    cols = []
    for cell in header:
        h = cell.strip().lower()
        if h.startswith("pcie"):
            cols.append("pcie")
        elif h.startswith("tcp"):
            cols.append("tcp")
        elif h.startswith("c api"):
            cols.append("c")
        elif h.startswith("tool"):
            cols.append("tool")
        elif h.startswith("test"):
            cols.append("test")
        else:
            cols.append(None)
    return cols


def check_command_table(text, idx, doc=COMMAND_TABLE):
    """Problems of the command table `text`: every name in a checked column must exist."""
    problems = []
    cols = None
    tables = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            cols = None
            continue
        cells = line.strip().strip("|").split("|")
        if cols is None:
            cols = table_columns(cells)
            tables += 1
            continue
        if set(line.replace("|", "").strip()) <= set("-: "):
            continue
        if len(cells) != len(cols):
            problems.append(f"{doc}:{lineno}: {len(cells)} cells under {len(cols)} headings")
            continue
        for cell, column in zip(cells, cols):
            if column is None:
                continue
            for span in CODE_SPAN.findall(cell):
                why = check_table_span(column, span.strip(), idx)
                if why:
                    problems.append(f"{doc}:{lineno}: `{span}` ({column} column): {why}")
    if tables == 0:
        problems.append(f"{doc}: no table found")
    return problems


# Which constants of the spec crate each section of the command table must have a row for:
# section heading prefix -> (file, `pub mod` in it).
COVERAGE = {
    "## Admin commands": ("crates/spec/src/opcode.rs", "admin"),
    "## NVM and zoned I/O commands": ("crates/spec/src/opcode.rs", "nvm"),
    "## Fabrics commands": ("crates/spec/src/fabrics.rs", "fctype"),
    "## Features": ("crates/spec/src/opcode.rs", "feature"),
    "## Log pages": ("crates/spec/src/opcode.rs", "log_page"),
}
CONST_U8 = re.compile(r"^\s*pub const ([A-Z][A-Z0-9_]*): u8 = (0x[0-9A-Fa-f]+|[A-Za-z_:]+);")


def spec_constants(read):
    """(file, module) -> {value: name} of the `pub const NAME: u8` of each `pub mod` of the
    files COVERAGE names; a constant defined as another crate path (`crate::zns::opcode::X`)
    takes that constant's value."""
    by_name = {}
    mods = {}
    for path in {f for f, _ in COVERAGE.values()} | {"crates/spec/src/zns.rs"}:
        text = read(path) or ""
        module = None
        for line in text.splitlines():
            m = re.match(r"^pub mod ([a-z_]+) \{", line)
            if m:
                module = m.group(1)
                continue
            if line.startswith("}"):
                module = None
                continue
            c = CONST_U8.match(line)
            if c and module:
                mods.setdefault((path, module), {})[c.group(1)] = c.group(2)
                by_name[c.group(1)] = c.group(2)
    out = {}
    for key, consts in mods.items():
        values = {}
        for name, v in consts.items():
            v = by_name.get(v.split("::")[-1], v) if not v.startswith("0x") else v
            if v.startswith("0x"):
                values[int(v, 16)] = name
        out[key] = values
    return out


def check_table_coverage(text, constants, extra=None, doc=COMMAND_TABLE):
    """Every opcode, Fabrics command type, feature and log page identifier the spec crate
    defines has a row (its `NNh` in the first column) in its section of the table."""
    extra = extra or {}
    problems = []
    sections = {}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = next((h for h in COVERAGE if line.startswith(h)), None)
            continue
        if current and line.startswith("|"):
            first = line.strip().strip("|").split("|")[0]
            sections.setdefault(current, set()).update(
                int(h, 16) for h in re.findall(r"\b([0-9A-F]{2})h\b", first)
            )
    for heading, key in COVERAGE.items():
        wanted = {v: (name, key[0]) for v, name in constants.get(key, {}).items()}
        wanted.update(extra.get(heading, {}))
        if not wanted:
            problems.append(f"{doc}: no constants found for `{heading}` in {key[0]}")
        for value, (name, path) in sorted(wanted.items()):
            if value not in sections.get(heading, set()):
                problems.append(
                    f"{doc}: {name} ({value:02X}h, {path}) has no row under `{heading}`"
                )
    return problems


# (column, span, exists): names the command-table check must pass (real ones, kept few and
# stable) and made-up ones it must catch, one per kind of check.
SELF_TEST_SPANS = [
    ("pcie", "QueuePair::submit", True),
    ("pcie", "QueuePair::submit_telepathy", False),
    ("pcie", "Controller::frobnicate", False),
    ("pcie", "AdminCommands::device_self_test", True),
    ("pcie", "Controller::connect", False),
    ("tcp", "TcpController::connect", True),
    ("tcp", "TcpController::submit_deallocate", False),
    ("tcp", "NoSuchTcpType", False),
    ("c", "nvme_qpair_submit_read", True),
    ("c", "nvme_qpair_submit_telepathy", False),
    ("c", "not_a_c_function", False),
    ("tool", "nvme-admin id-ctrl", True),
    ("tool", "nvme-perf -w randread", True),
    ("tool", "nvme-dd --fua", True),
    ("tool", "nvme-admin make-coffee", False),
    ("tool", "nvme-perf --warp-drive", False),
    ("tool", "nvme-perf -Z", False),
    ("tool", "nvme-nonexistent list", False),
    ("test", "admin.sh", True),
    ("test", "no-such-case.sh", False),
    ("test", "log_pages::smart_counts_unicorns", False),
    ("test", "a_test_nobody_ever_wrote_anywhere", False),
    ("test", "Not A Test", False),
]

# A table whose one made-up name must be reported with its line, and nothing else.
SELF_TEST_TABLE = """intro

| command | spec | PCIe | TCP | C API | tool | test |
|---|---|---|---|---|---|---|
| Read | NVM | `QueuePair::submit` | — | `nvme_qpair_submit_read` | `nvme-admin id-ctrl` | `admin.sh` |
| Made up | — | — | — | — | — | `unicorn.sh` |
"""


def self_test(idx):
    """The command-table check must pass the real names and catch every made-up one."""
    failures = []
    for column, span, exists in SELF_TEST_SPANS:
        why = check_table_span(column, span, idx)
        if exists and why:
            failures.append(f"self-test: real `{span}` ({column}) refused: {why}")
        if not exists and not why:
            failures.append(f"self-test: made-up `{span}` ({column}) passed the check")
    coverage = {COVERAGE["## Admin commands"]: {0x06: "IDENTIFY", 0x08: "ABORT"}}
    admin_table = "## Admin commands\n\n| command |\n|---|\n| Identify (06h) |\n"
    missing = check_table_coverage(admin_table, coverage, doc="self-test")
    if not any("ABORT" in p for p in missing) or any("IDENTIFY" in p for p in missing):
        failures.append(f"self-test: the coverage check said {missing} for a table without Abort")
    problems = check_command_table(SELF_TEST_TABLE, idx, doc="self-test")
    if len(problems) != 1 or not problems[0].startswith("self-test:6: `unicorn.sh`"):
        failures.append(f"self-test: the table check said {problems}, not line 6's case")
    return failures


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

    def read(p):
        path = os.path.join(ROOT, p)
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()

    idx = TableIndex(files, read)
    problems = self_test(idx)
    if COMMAND_TABLE in docs:
        table = read(COMMAND_TABLE)
        problems += check_command_table(table, idx)
        fabrics = "crates/spec/src/fabrics.rs"
        lid = re.search(r"DISCOVERY_LOG_LID: u8 = (0x[0-9A-Fa-f]+)", read(fabrics) or "")
        extra = {}
        if lid:
            extra["## Log pages"] = {int(lid.group(1), 16): ("DISCOVERY_LOG_LID", fabrics)}
        problems += check_table_coverage(table, spec_constants(read), extra)
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
