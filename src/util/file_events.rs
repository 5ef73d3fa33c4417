//! Which file-system events the watchers act on.

use notify::EventKind;
use notify::event::{AccessKind, AccessMode};

/// Whether an event can mean a file's content changed. Opening and reading a file (as the
/// watchers themselves do after a change) are events too, and acting on them would make a
/// watcher that reads the file wake itself forever.
pub fn changes_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, ModifyKind, RemoveKind, RenameMode};

    #[test]
    fn reads_do_not_count_as_changes() {
        assert!(!changes_content(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!changes_content(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(changes_content(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(changes_content(&EventKind::Create(CreateKind::File)));
        assert!(changes_content(&EventKind::Modify(ModifyKind::Name(
            RenameMode::To
        ))));
        assert!(changes_content(&EventKind::Remove(RemoveKind::File)));
    }
}
