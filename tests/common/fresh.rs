//! Whether a program cargo built is current. The runner starts the example and binary programs
//! as they are on disk, and a single test file's run (`cargo test -p gaspi-coll --test
//! alltoallv`) rebuilds no example and no other package's binary: after a change it would
//! judge the old code. Cargo's dep-info file beside each program (`<program>.d`) lists every
//! file it was built from.

use std::path::{Path, PathBuf};

/// The first file `program` was built from that changed after it was built, or is gone;
/// `None` when it is current, or has no dep-info beside it (not built by cargo there, so
/// nothing to judge by).
pub fn newer_source(program: &Path) -> Option<PathBuf> {
    let built = std::fs::metadata(program).and_then(|m| m.modified()).ok()?;
    let info = std::fs::read_to_string(program.with_extension("d")).ok()?;
    sources(&info).into_iter().find(|source| {
        std::fs::metadata(source)
            .and_then(|m| m.modified())
            .map_or(true, |changed| changed > built)
    })
}

/// The files a dep-info line (`<output>: <file> <file> ...`, a space in a name escaped as
/// `\ `) lists after the output.
fn sources(info: &str) -> Vec<PathBuf> {
    let Some((_, files)) = info.lines().next().and_then(|line| line.split_once(": ")) else {
        return Vec::new();
    };
    let mut sources = Vec::new();
    let mut name = String::new();
    let mut chars = files.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => name.extend(chars.next()),
            ' ' if !name.is_empty() => sources.push(PathBuf::from(std::mem::take(&mut name))),
            ' ' => {}
            c => name.push(c),
        }
    }
    if !name.is_empty() {
        sources.push(PathBuf::from(name));
    }
    sources
}
