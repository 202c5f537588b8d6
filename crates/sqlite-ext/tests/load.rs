//! The extension in unmodified SQLite programs, against the in-process emulator
//! (`device=sim`; `cargo test` builds the extension with its `emulator` feature through the
//! self dev-dependency): the system's `sqlite3` shell and Python's `sqlite3` module load
//! target/<profile>/deps/libnvme_sqlite.so, write a database on an emulated namespace, read it back
//! after reopening, pass `PRAGMA integrity_check`, and use the default VFS in the same
//! process. A program that is not installed is reported and skipped (the symbol check runs
//! always).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The extension `cargo test` built (with the emulator) next to this test binary
/// (target/<profile>/deps/; a plain `cargo build` puts its own, without the emulator, one
/// directory up).
fn extension() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let so = exe.parent().unwrap().join("libnvme_sqlite.so");
    assert!(so.exists(), "{} not built", so.display());
    so
}

/// `program` when it runs (`--version`), else `None`.
fn find(program: &str, probe: &[&str]) -> Option<PathBuf> {
    let ok = Command::new(program)
        .args(probe)
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then(|| PathBuf::from(program))
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn carries_no_sqlite_of_its_own() {
    let so = extension();
    let Ok(out) = Command::new("nm").arg("-D").arg(&so).output() else {
        eprintln!("skipped: no `nm`");
        return;
    };
    let (dynamic, _) = text(&out);
    let mut exported: Vec<&str> = dynamic
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace().rev();
            let (name, kind) = (w.next()?, w.next()?);
            (kind != "U" && kind != "w" && kind != "v" && name.starts_with("sqlite3"))
                .then_some(name)
        })
        .collect();
    exported.sort_unstable();
    assert_eq!(
        exported,
        ["sqlite3_extension_init", "sqlite3_nvmesqlite_init"]
    );
    let undefined_sqlite = dynamic
        .lines()
        .filter(|l| l.contains(" U ") && l.contains("sqlite3"))
        .count();
    assert_eq!(undefined_sqlite, 0, "links SQLite symbols:\n{dynamic}");
    // Not even hidden: no SQLite code (e.g. its VDBE or sqlite3_open_v2) in the object.
    let all = Command::new("nm").arg(&so).output().unwrap();
    let (all, _) = text(&all);
    for sym in ["sqlite3VdbeExec", "sqlite3_open_v2", "sqlite3_vfs_register"] {
        assert!(
            !all.lines().any(|l| l.ends_with(&format!(" {sym}"))),
            "the extension carries SQLite's `{sym}`"
        );
    }
}

#[test]
fn sqlite3_shell_loads_it_writes_and_reads_back() {
    let Some(shell) = find("sqlite3", &["-version"]) else {
        eprintln!("skipped: no `sqlite3` shell (apt-get install sqlite3)");
        return;
    };
    let so = extension();
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.db");
    // nsid 1 in DELETE mode, nsid 2 in WAL mode; close and reopen each (read back from the
    // emulated medium), then a kernel file through the default VFS in the same process.
    let script = format!(
        ".bail on
.load {so}
.open file:shell.db?vfs=nvme&device=sim&nsid=1&format=ifblank
CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
  INSERT INTO t SELECT i, printf('row-%05d', i) FROM n;
.open file:wal.db?vfs=nvme&device=sim&nsid=2&format=ifblank
PRAGMA journal_mode=WAL;
CREATE TABLE w(x);
INSERT INTO w VALUES ('on nsid 2');
.open file:shell.db?vfs=nvme&device=sim&nsid=1
SELECT 'shell', count(*), sum(k), max(v) FROM t;
PRAGMA integrity_check;
.open file:wal.db?vfs=nvme&device=sim&nsid=2
SELECT 'wal', x FROM w;
PRAGMA integrity_check;
.open {plain}
CREATE TABLE p(x);
INSERT INTO p VALUES ('default vfs');
SELECT 'plain', x FROM p;
",
        so = so.display(),
        plain = plain.display()
    );
    let out = run_with_stdin(&shell, &[], &script);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "sqlite3 failed: {stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "wal",
            "shell|2000|2001000|row-02000",
            "ok",
            "wal|on nsid 2",
            "ok",
            "plain|default vfs"
        ],
        "{stderr}"
    );
    // The default VFS wrote a real file.
    assert!(std::fs::metadata(&plain).unwrap().len() > 0);
}

#[test]
fn sqlite3_shell_reports_bad_device_and_missing_parameters() {
    let Some(shell) = find("sqlite3", &["-version"]) else {
        eprintln!("skipped: no `sqlite3` shell");
        return;
    };
    let so = extension();
    for (uri, expect) in [
        (
            "file:x.db?vfs=nvme&device=nonsense",
            "bad device `nonsense`",
        ),
        ("file:x.db?vfs=nvme", "no `device` URI parameter"),
        (
            "file:x.db?vfs=nvme&device=sim&nsid=0",
            "bad URI parameter nsid=`0`",
        ),
        ("file:x.db?vfs=nvme&device=sim&nsid=9", "namespace"),
        // A blank namespace without format=ifblank is refused, not formatted.
        (
            "file:x.db?vfs=nvme&device=sim&nsid=1",
            "no SQLite directory",
        ),
        // A PCI function that does not exist.
        ("file:x.db?vfs=nvme&device=0000:7f:1f.7", "0000:7f:1f.7"),
    ] {
        let script = format!(".load {}\n.open {uri}\nCREATE TABLE t(x);\n", so.display());
        let out = run_with_stdin(&shell, &["-bail"], &script);
        let (_, stderr) = text(&out);
        // (The shell's exit status after a failed .open differs between versions.)
        assert!(
            stderr.contains("unable to open database"),
            "{uri}: opened:\n{stderr}"
        );
        assert!(
            stderr.contains("nvme VFS: ") && stderr.contains(expect),
            "{uri}: expected `{expect}` in:\n{stderr}"
        );
    }
}

#[test]
fn python_sqlite3_loads_it_writes_and_reads_back() {
    // A Python whose sqlite3 module allows extensions (a Python built without
    // --enable-loadable-sqlite-extensions, as some pyenv builds are, does not).
    let probe = [
        "-c",
        "import sqlite3; sqlite3.connect(':memory:').enable_load_extension(True)",
    ];
    let Some(python) = ["/usr/bin/python3", "python3"]
        .into_iter()
        .find_map(|p| find(p, &probe))
    else {
        eprintln!("skipped: no python3 whose sqlite3 module loads extensions");
        return;
    };
    let so = extension();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(python)
        .arg("-c")
        .arg(PYTHON)
        .arg(&so)
        .arg(dir.path().join("plain.db"))
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "python failed: {stdout}\n{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["rows 500 124750", "integrity ok", "default vfs ok"],
        "{stderr}"
    );
}

/// Loads the extension from one connection, closes it (the VFS stays: loaded permanently),
/// writes and reads back through others.
const PYTHON: &str = r#"
import sqlite3, sys
so, plain = sys.argv[1], sys.argv[2]
c = sqlite3.connect(":memory:")
c.enable_load_extension(True)
c.load_extension(so)
c.close()
uri = "file:py.db?vfs=nvme&device=sim&nsid=1&format=ifblank"
db = sqlite3.connect(uri, uri=True)
db.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB)")
with db:
    db.executemany("INSERT INTO t VALUES (?, ?)", [(i, bytes([i % 256]) * 1000) for i in range(500)])
db.close()
db = sqlite3.connect("file:py.db?vfs=nvme&device=sim&nsid=1", uri=True)
n, s = db.execute("SELECT count(*), sum(k) FROM t").fetchone()
assert all(v == bytes([k % 256]) * 1000 for k, v in db.execute("SELECT k, v FROM t"))
print("rows", n, s)
print("integrity", db.execute("PRAGMA integrity_check").fetchone()[0])
p = sqlite3.connect(plain)
p.execute("CREATE TABLE p(x)")
p.execute("INSERT INTO p VALUES (1)")
p.commit()
print("default vfs", "ok" if p.execute("SELECT x FROM p").fetchone()[0] == 1 else "bad")
"#;

fn run_with_stdin(program: &Path, args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}
