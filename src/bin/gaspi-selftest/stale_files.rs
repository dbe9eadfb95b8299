//! `stale-files`: shared-memory files that a dead process of this rank's pid left are removed,
//! and the job runs.
//!
//! Before it joins the job, every rank plants files named after itself (its pid namespace and
//! pid) of every kind the runtime makes (shm endpoint region, directory, notification tables,
//! system, passive and allreduce areas, user segments), 20 numbers of each, so that every name
//! the runtime would take is there, and one in the temporary directory: what a job killed
//! together with its launcher leaves to the next process of that pid. It also plants two files
//! of live processes: one of its pid in another pid namespace (inode 1, which no namespace has)
//! and one of its launcher's pid. Then it joins, creates a segment, `write_notify`s into its
//! right neighbour's and checks what its left neighbour wrote (bytes and value). The data line
//! says how many planted files of its own are still there (a file the runtime made since, of
//! the same name, holds no marker and does not count) and how many of the live processes'
//! are, for the test to judge; the scenario removes those last ones itself, whatever became
//! of the job.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use gaspi::{local, remote, Context, Notification, QueueId, SegmentId, Timeout};
use gaspi_segments::{pid_namespace, ShmOwner};

use crate::check::{
    ensure, fill_pattern, seed, take_arrival, Data, Doing, Failure, Outcome, Report,
};

/// The kinds of file the runtime makes (a segment's name reduced to a file name's characters).
const KINDS: [&str; 9] = [
    "ep",
    "directory",
    "system_table",
    "system",
    "passive",
    "reduce0",
    "seg1",
    "table1",
    "libtable0",
];
/// Numbers planted of each kind in `/dev/shm`: more than a creation tries (16) before it goes
/// to the temporary directory, and than the runtime's first files take.
const NUMBERS: u64 = 20;
/// What planted files hold, which tells them from the runtime's files of the same name.
const MARKER: &[u8] = b"gaspi stale-files selftest";

const SEGMENT: SegmentId = 1;
const LEN: u64 = 64 << 10;
const QUEUE: QueueId = 0;
const TIMEOUT: Timeout = Timeout::Millis(60_000);

/// The files this rank planted.
struct Planted {
    own: Vec<PathBuf>,
    live: Vec<PathBuf>,
}

static PLANTED: OnceLock<Planted> = OnceLock::new();

/// The planted files of live processes, removed when dropped: whatever became of the job,
/// nobody else removes them.
pub struct LiveFiles(Vec<PathBuf>);

impl Drop for LiveFiles {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Plants the files, before the context exists; the guard returned removes those of live
/// processes.
pub fn plant() -> Outcome<LiveFiles> {
    let me = ShmOwner::this_process();
    ensure!(
        me.pid_namespace != 0,
        "no pid namespace (/proc/self/ns/pid): files of this pid might be another namespace's"
    );
    let shm = Path::new("/dev/shm");
    let mut own: Vec<PathBuf> = KINDS
        .iter()
        .flat_map(|kind| {
            (0..NUMBERS).map(move |n| shm.join(format!("{}{n}", me.file_prefix(kind))))
        })
        .collect();
    own.push(std::env::temp_dir().join(format!("{}{NUMBERS}", me.file_prefix("seg1"))));
    let other_namespace = ShmOwner {
        pid_namespace: 1,
        pid: me.pid,
    };
    let launcher = ShmOwner {
        pid_namespace: pid_namespace(),
        pid: std::os::unix::process::parent_id(),
    };
    // Numbered after this rank's pid, so that the ranks' names differ.
    let live = [other_namespace, launcher]
        .map(|owner| shm.join(format!("{}{}", owner.file_prefix("seg1"), me.pid)))
        .to_vec();
    let guard = LiveFiles(live.clone());
    for path in own.iter().chain(&live) {
        std::fs::write(path, MARKER)
            .map_err(|e| Failure(format!("planting {}: {e}", path.display())))?;
    }
    // Planted once per process, before its one context: a second call finds the first's.
    let _ = PLANTED.set(Planted { own, live });
    Ok(guard)
}

/// Whether `path` is a planted file (not one the runtime made under its name since).
fn planted_there(path: &Path) -> bool {
    let mut start = [0; MARKER.len()];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut start))
        .is_ok_and(|()| start == MARKER)
}

pub fn run(ctx: &Context) -> Outcome<Report> {
    let planted = PLANTED
        .get()
        .ok_or_else(|| Failure("no files were planted before init".into()))?;
    let (me, n) = (ctx.rank(), ctx.size());
    let (left, right) = ((me + n - 1) % n, (me + 1) % n);
    ctx.segment_create(SEGMENT, 2 * LEN, TIMEOUT)
        .doing(|| "segment_create")?;
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after segment_create")?;
    ctx.segment_write(SEGMENT, 0, &pattern(me))
        .doing(|| "filling the segment")?;
    let note = Notification {
        id: 0,
        value: me + 1,
    };
    ctx.write_notify(
        local(SEGMENT, 0),
        remote(right, SEGMENT, LEN),
        LEN,
        note,
        QUEUE,
    )
    .doing(|| "write_notify into the right neighbour")?;
    take_arrival(
        ctx,
        TIMEOUT,
        SEGMENT,
        (left + 1, LEN),
        &pattern(left),
        "the left neighbour's write",
    )?;
    ctx.wait(QUEUE, TIMEOUT)
        .doing(|| "completing the write_notify")?;

    let left_own: Vec<&PathBuf> = planted.own.iter().filter(|p| planted_there(p)).collect();
    let kept_live = planted.live.iter().filter(|p| planted_there(p)).count();
    let mut data = Data::default();
    data.put("planted_own", planted.own.len());
    data.put("own_left", left_own.len());
    data.put(
        "first_own_left",
        left_own
            .first()
            .map_or(String::new(), |p| p.display().to_string()),
    );
    data.put("planted_live", planted.live.len());
    data.put("live_kept", kept_live);
    Ok(Report {
        summary: format!(
            "joined over {} planted files of this pid, and write_notify landed ({} KiB)",
            planted.own.len(),
            LEN >> 10
        ),
        data,
    })
}

fn pattern(from: u32) -> Vec<u8> {
    let mut bytes = vec![0; LEN as usize];
    fill_pattern(seed(&[u64::from(from), LEN, 0x57a1e]), &mut bytes);
    bytes
}
