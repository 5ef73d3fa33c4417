//! The store's write-ahead log: numbered segment files beside the store
//! (`switchyard.log.N`), each a header and a run of frames, one frame per commit. A frame
//! is its payload's length and CRC-32, then the payload: the commit's [`Change`]s in order.
//! A commit is one `write` and one `fdatasync`; the store's B-tree gets the changes later,
//! many commits at once ([`super::checkpoint`]), and a segment is deleted once a checkpoint
//! holds it. The store's `meta` table names the last segment a checkpoint holds, so a
//! segment whose deletion a crash undid is never applied twice.
//!
//! A frame cut short or whose checksum fails ends its segment: it is a commit whose sync
//! never returned (nothing waited on it), and it is cut off before the log is written again.
//!
//! Small commits overwrite zeros the writer wrote ahead of them while it had nothing to do
//! ([`Segment::write_ahead`]), so the sync of most commits writes their data and no
//! metadata: the file keeps its size and its blocks.
//! On a journaling file system a growing file's sync commits the journal as well (about
//! twice the latency, `scripts/fsync-floor.py`). A frame head of zeros ends the segment.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The first bytes of every segment.
const HEADER: &[u8; 8] = b"SWYLOG01";

/// The file name of segment `n` in `dir`.
pub(super) fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("switchyard.log.{n}"))
}

/// One change to the store, as logged and as applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// `table[key] = value`.
    Set {
        table: Arc<str>,
        key: String,
        value: Vec<u8>,
    },
    /// `table[key]` removed.
    Remove { table: Arc<str>, key: String },
    /// Every row of `table` removed.
    Drop { table: Arc<str> },
}

const SET: u8 = 0;
const REMOVE: u8 = 1;
const DROP: u8 = 2;

impl Change {
    /// Appends the change's encoding to `out`.
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        let text = |out: &mut Vec<u8>, s: &[u8]| {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s);
        };
        match self {
            Change::Set { table, key, value } => {
                out.push(SET);
                text(out, table.as_bytes());
                text(out, key.as_bytes());
                text(out, value);
            }
            Change::Remove { table, key } => {
                out.push(REMOVE);
                text(out, table.as_bytes());
                text(out, key.as_bytes());
            }
            Change::Drop { table } => {
                out.push(DROP);
                text(out, table.as_bytes());
            }
        }
    }

    /// The length of the change's encoding.
    fn encoded_len(&self) -> usize {
        match self {
            Change::Set { table, key, value } => 13 + table.len() + key.len() + value.len(),
            Change::Remove { table, key } => 9 + table.len() + key.len(),
            Change::Drop { table } => 5 + table.len(),
        }
    }

    /// Decodes the changes of one frame's payload; `None` if it does not decode.
    fn decode_all(mut payload: &[u8]) -> Option<Vec<Change>> {
        fn bytes<'a>(input: &mut &'a [u8]) -> Option<&'a [u8]> {
            let len = u32::from_le_bytes(input.get(..4)?.try_into().ok()?) as usize;
            let value = input.get(4..4 + len)?;
            *input = &input[4 + len..];
            Some(value)
        }
        fn text(input: &mut &[u8]) -> Option<String> {
            String::from_utf8(bytes(input)?.to_vec()).ok()
        }
        let mut changes = Vec::new();
        while let Some((&tag, rest)) = payload.split_first() {
            payload = rest;
            let table: Arc<str> = text(&mut payload)?.into();
            changes.push(match tag {
                SET => Change::Set {
                    table,
                    key: text(&mut payload)?,
                    value: bytes(&mut payload)?.to_vec(),
                },
                REMOVE => Change::Remove {
                    table,
                    key: text(&mut payload)?,
                },
                DROP => Change::Drop { table },
                _ => return None,
            });
        }
        Some(changes)
    }
}

/// Wraps an encoded payload as a frame: length, CRC-32, payload.
#[cfg(test)]
pub(super) fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + FRAME_HEAD);
    out.extend_from_slice(&[0; FRAME_HEAD]);
    out.extend_from_slice(payload);
    seal(&mut out);
    out
}

/// The bytes before a frame's payload: its length and its CRC-32.
const FRAME_HEAD: usize = 8;

/// `changes` encoded as one frame into `out` (emptied first, its capacity kept): a
/// commit's payload is neither grown nor copied into its frame, and the writer's buffer is
/// reused from commit to commit.
pub(super) fn frame_of(changes: &[Change], out: &mut Vec<u8>) {
    let size: usize = changes.iter().map(Change::encoded_len).sum();
    out.clear();
    out.reserve(FRAME_HEAD + size);
    out.extend_from_slice(&[0; FRAME_HEAD]);
    for change in changes {
        change.encode(out);
    }
    seal(out);
}

/// Fills in the head of a frame whose payload follows [`FRAME_HEAD`] zero bytes.
fn seal(out: &mut [u8]) {
    let (head, payload) = out.split_at_mut(FRAME_HEAD);
    head[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    head[4..].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
}

/// The fewest zeros written ahead of a segment's last frame.
const AHEAD_MIN: u64 = 16 << 10;
/// The most zeros written ahead of a segment's last frame.
const AHEAD_MAX: u64 = 1 << 20;
/// Frames at least this long get no zeros written after them: few commits are that large
/// (a list's, held back to gather changes), and their metadata is little of their cost.
const AHEAD_FRAME: u64 = 64 << 10;
/// The zeros written ahead are written from.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

/// The segment being written.
pub(super) struct Segment {
    /// Its number.
    pub(super) number: u64,
    path: PathBuf,
    file: File,
    /// Bytes known written and synced: a failed append is cut back to here.
    len: u64,
    /// Where the file ends: `len`, then the zeros written ahead.
    ahead: u64,
    /// The size of the last frame appended.
    last: u64,
}

impl Segment {
    /// Creates segment `number` in `dir` (replacing a file of that name) and syncs the
    /// folder, so the segment is there after a crash.
    pub(super) fn create(dir: &Path, number: u64) -> std::io::Result<Self> {
        let path = segment_path(dir, number);
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)?;
        file.write_all(HEADER)?;
        file.sync_all()?;
        File::open(dir)?.sync_all()?;
        Ok(Self {
            number,
            path,
            file,
            len: HEADER.len() as u64,
            ahead: HEADER.len() as u64,
            last: 0,
        })
    }

    /// Appends `frame` and syncs it. On failure the segment is cut back to what it held
    /// before, so a later append starts on a frame boundary.
    pub(super) fn append(&mut self, frame: &[u8]) -> std::io::Result<()> {
        let end = self.len + frame.len() as u64;
        let written = self
            .file
            .write_all_at(frame, self.len)
            .and_then(|()| self.file.sync_data());
        match written {
            Ok(()) => {
                self.len = end;
                self.ahead = self.ahead.max(end);
                self.last = frame.len() as u64;
                Ok(())
            }
            Err(e) => {
                if self.file.set_len(self.len).is_ok() {
                    self.ahead = self.len;
                }
                Err(e)
            }
        }
    }

    /// After a commit, while nothing waits on the writer: when the last frame was small
    /// and the zeros after it would not hold two more like it, writes and syncs as many as
    /// the segment holds, within [`AHEAD_MIN`] and [`AHEAD_MAX`] (a segment grows a few
    /// times a second under load, not at every commit). Large frames (a list's, held back
    /// to gather changes) get none after them. A failure leaves the segment as it was: the
    /// next commit grows it.
    pub(super) fn write_ahead(&mut self) {
        let wanted = self.len + 2 * self.last + FRAME_HEAD as u64;
        if self.last >= AHEAD_FRAME || wanted <= self.ahead {
            return;
        }
        let to = self.len + self.len.clamp(AHEAD_MIN, AHEAD_MAX);
        let mut at = self.ahead;
        while at < to {
            let n = (to - at).min(ZEROS.len() as u64);
            if self.file.write_all_at(&ZEROS[..n as usize], at).is_err() {
                return;
            }
            at += n;
        }
        if self.file.sync_data().is_ok() {
            self.ahead = to;
        }
    }

    /// Its file.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Its length in bytes.
    pub(super) fn len(&self) -> u64 {
        self.len
    }
}

/// The segments in `dir`, by number, oldest first.
pub(super) fn segments(dir: &Path) -> std::io::Result<Vec<u64>> {
    let mut numbers = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        if let Some(n) = name
            .to_str()
            .and_then(|n| n.strip_prefix("switchyard.log."))
            .and_then(|n| n.parse::<u64>().ok())
        {
            numbers.push(n);
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}

/// What one segment holds.
pub(super) struct Replayed {
    /// The changes of its whole frames, in order.
    pub(super) changes: Vec<Change>,
    /// Bytes after the last whole frame (a commit cut short), ignored; 0 when they are
    /// all zeros written ahead.
    pub(super) torn: u64,
}

/// Reads segment `path`. A file that does not begin with the header is an error; a frame
/// cut short or failing its checksum ends the segment.
pub(super) fn replay(path: &Path) -> Result<Replayed, String> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() < HEADER.len() {
        // Created, and cut short before its header was synced: it holds no commit.
        return Ok(Replayed {
            changes: Vec::new(),
            torn: bytes.len() as u64,
        });
    }
    if &bytes[..HEADER.len()] != HEADER {
        return Err(format!("{}: not a switchyard log segment", path.display()));
    }
    let mut at = HEADER.len();
    let mut changes = Vec::new();
    while let Some(head) = bytes.get(at..at + FRAME_HEAD) {
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        if len == 0 && crc == 0 {
            // Zeros written ahead: when the rest are zeros too, the segment ends here.
            if bytes[at..].iter().all(|b| *b == 0) {
                at = bytes.len();
            }
            break;
        }
        let Some(payload) = bytes.get(at + FRAME_HEAD..at + FRAME_HEAD + len) else {
            break;
        };
        if crc32fast::hash(payload) != crc {
            break;
        }
        let Some(decoded) = Change::decode_all(payload) else {
            break;
        };
        changes.extend(decoded);
        at += FRAME_HEAD + len;
    }
    Ok(Replayed {
        changes,
        torn: (bytes.len() - at) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str, value: &str) -> Change {
        Change::Set {
            table: "t".into(),
            key: key.into(),
            value: value.as_bytes().to_vec(),
        }
    }

    fn payload(changes: &[Change]) -> Vec<u8> {
        let mut out = Vec::new();
        for change in changes {
            change.encode(&mut out);
        }
        out
    }

    #[test]
    fn frames_read_back_in_order_and_a_torn_tail_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let mut segment = Segment::create(dir.path(), 7).unwrap();
        let first = [
            set("a", "1"),
            Change::Remove {
                table: "t".into(),
                key: "b".into(),
            },
        ];
        let second = [Change::Drop { table: "u".into() }, set("c", "")];
        // The writer builds its frames in place, in a buffer it reuses; they are the
        // payload framed.
        let mut built = vec![1, 2, 3];
        frame_of(&first, &mut built);
        assert_eq!(built, frame(&payload(&first)));
        segment.append(&frame(&payload(&first))).unwrap();
        frame_of(&second, &mut built);
        segment.append(&built).unwrap();
        segment.write_ahead();
        let whole = segment.len();
        // The file holds zeros after the frames, which end the segment.
        let size = std::fs::metadata(segment.path()).unwrap().len();
        assert!(size >= whole + AHEAD_MIN, "{size} bytes for {whole}");
        assert_eq!(replay(segment.path()).unwrap().torn, 0);
        // A third commit whose write was cut short, and one whose bytes were damaged.
        let third = frame(&payload(&[set("d", "4")]));
        let file = OpenOptions::new().write(true).open(segment.path()).unwrap();
        file.write_all_at(&third[..third.len() - 2], whole).unwrap();
        let replayed = replay(segment.path()).unwrap();
        assert_eq!(replayed.changes, [&first[..], &second[..]].concat());
        assert_eq!(replayed.torn, size - whole);

        file.set_len(whole).unwrap();
        let mut damaged = third.clone();
        *damaged.last_mut().unwrap() ^= 1;
        file.write_all_at(&damaged, whole).unwrap();
        let replayed = replay(segment.path()).unwrap();
        assert_eq!(replayed.changes.len(), 4);
        assert_eq!(replayed.torn, damaged.len() as u64);

        // A commit whose first bytes never reached the disk, and whose later bytes did.
        file.set_len(whole).unwrap();
        let mut unsynced = vec![0; FRAME_HEAD];
        unsynced.extend_from_slice(&third);
        file.write_all_at(&unsynced, whole).unwrap();
        let replayed = replay(segment.path()).unwrap();
        assert_eq!(replayed.changes.len(), 4);
        assert_eq!(replayed.torn, unsynced.len() as u64);
        assert_eq!(segments(dir.path()).unwrap(), [7]);
    }

    #[test]
    fn small_commits_overwrite_zeros_written_ahead_and_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut segment = Segment::create(dir.path(), 1).unwrap();
        let size = |segment: &Segment| std::fs::metadata(segment.path()).unwrap().len();
        let mut written = Vec::new();
        let mut sizes = Vec::new();
        let mut lens = Vec::new();
        // Small commits fill the zeros written ahead, then write more; a large one is
        // appended with none after it, and the next small one writes them again.
        for (i, value) in [10, 5_000, 20_000, 10, 200_000, 10].into_iter().enumerate() {
            let change = set(&i.to_string(), &"v".repeat(value));
            let frame = frame(&payload(std::slice::from_ref(&change)));
            segment.append(&frame).unwrap();
            segment.write_ahead();
            written.push(change);
            sizes.push(size(&segment));
            lens.push(segment.len());
        }
        assert_eq!(
            sizes[0], sizes[1],
            "the second commit fits in the zeros: {sizes:?}"
        );
        assert!(sizes[2] > sizes[1], "{sizes:?}");
        assert_eq!(sizes[3], sizes[2], "{sizes:?}");
        assert_eq!(sizes[4], lens[4], "nothing written ahead of a large frame");
        assert!(
            sizes[5] >= lens[5] + AHEAD_MIN && sizes[5] <= lens[5] + AHEAD_MAX,
            "{sizes:?}"
        );
        let replayed = replay(segment.path()).unwrap();
        assert_eq!(replayed.changes, written);
        assert_eq!(replayed.torn, 0);
    }

    #[test]
    fn a_file_that_is_not_a_segment_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = segment_path(dir.path(), 1);
        std::fs::write(&path, b"something else entirely").unwrap();
        let error = replay(&path).err().unwrap();
        assert!(
            error.contains("switchyard.log.1") && error.contains("not a switchyard log"),
            "{error}"
        );
    }
}
