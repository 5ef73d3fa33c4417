//! Whether the pool's slots may be kept resident between instances: a probe of the kernel's
//! `PAGEMAP_SCAN` and of swap, run once at start.
//!
//! # Decision: resident only where the reset is exact and nothing can swap
//!
//! A slot kept resident is reset in place: the engine asks `PAGEMAP_SCAN` which pages the
//! last instance wrote (present, written, not the zero page, not a file page) and restores
//! just those. That is only as good as the kernel's answer. Two things can make it wrong:
//!
//! - a kernel that reports pages never touched as written makes the reset rewrite the whole
//!   memory (slow, still correct);
//! - a written page that was swapped out is not present, so the scan skips it and the next
//!   instance could read what the last one wrote there (fast, and a leak between events).
//!
//! So the host maps a region aligned as a pool slot is, writes one page, reads another (the
//! zero page), scans it with the engine's arguments and requires that exactly the written
//! page is reported; and it requires that the process cannot swap (no swap device in
//! `/proc/swaps`, or the cgroup's `memory.swap.max` is 0). Otherwise slots are decommitted
//! after each instance (the kernel's fresh zero pages, copy-on-write from the image), which
//! is always exact. `plugin_slots:` in the config forces either mode.
//!
//! This is the one place the daemon speaks to the kernel directly, so it is the one module
//! allowed `unsafe`: a private anonymous mapping it owns and one `ioctl` on
//! `/proc/self/pagemap`.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;

/// How pool slots are made ready for the next instance, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SlotMode {
    /// `resident` (reset in place) or `decommit` (pages given back to the kernel).
    pub mode: &'static str,
    /// Why this mode runs, in words.
    pub reason: String,
}

impl SlotMode {
    /// Whether slots are kept resident.
    pub fn resident(&self) -> bool {
        self.mode == "resident"
    }
}

pub use crate::config::schema::PluginSlots as SlotChoice;

/// Decides the slot mode for `choice`, probing the kernel when it is `Auto`.
pub fn decide(choice: SlotChoice) -> SlotMode {
    match choice {
        SlotChoice::Resident => SlotMode {
            mode: "resident",
            reason: "plugin_slots: resident".into(),
        },
        SlotChoice::Decommit => SlotMode {
            mode: "decommit",
            reason: "plugin_slots: decommit".into(),
        },
        SlotChoice::Auto => match (scan_is_exact(), swap()) {
            (Ok(()), Ok(())) => SlotMode {
                mode: "resident",
                reason: "the kernel's page scan reports exactly the pages written, and the process cannot swap".into(),
            },
            (Err(why), _) | (Ok(()), Err(why)) => SlotMode {
                mode: "decommit",
                reason: why,
            },
        },
    }
}

/// `Ok` when nothing this process holds can be swapped out; why not otherwise.
fn swap() -> Result<(), String> {
    let cgroup_max = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| {
            // cgroup v2: a single line `0::/PATH`.
            let path = text
                .lines()
                .find_map(|l| l.strip_prefix("0::"))?
                .to_string();
            std::fs::read_to_string(format!("/sys/fs/cgroup{path}/memory.swap.max")).ok()
        });
    if cgroup_max.as_deref().map(str::trim) == Some("0") {
        return Ok(());
    }
    swap_devices(&std::fs::read_to_string("/proc/swaps").unwrap_or_default())
}

/// `Ok` when `/proc/swaps` (its text) lists no swap device.
fn swap_devices(text: &str) -> Result<(), String> {
    let devices: Vec<&str> = text
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    if devices.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the process can swap ({} in /proc/swaps, and its cgroup's memory.swap.max is not 0): a swapped-out page would escape the in-place reset",
            devices.join(", ")
        ))
    }
}

/// From linux/fs.h (Linux 6.7): one region a scan reports.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// From linux/fs.h (Linux 6.7): the scan's arguments.
#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

const PAGE_IS_WRITTEN: u64 = 1 << 1;
const PAGE_IS_FILE: u64 = 1 << 2;
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_PFNZERO: u64 = 1 << 5;
/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 = (3 << 30) | ((size_of::<PmScanArg>() as u64) << 16) | (0x66 << 8) | 16;

/// The slot-sized probe: 2 MiB-aligned, as the pool aligns slots, so one page table covers
/// the written page and the untouched ones around it.
const ALIGN: usize = 2 << 20;
/// Pages scanned.
const PAGES: usize = 64;

/// An anonymous private mapping, unmapped when dropped.
struct Mapping {
    base: *mut libc::c_void,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base` and `len` are exactly what mmap returned, unmapped once.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

/// `Ok` when a scan with the engine's arguments reports exactly the one page written.
fn scan_is_exact() -> Result<(), String> {
    let pagemap = File::open("/proc/self/pagemap")
        .map_err(|e| format!("/proc/self/pagemap cannot be read ({e})"))?;
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .map_err(|_| "the page size is unknown".to_string())?;
    let len = ALIGN * 2;
    // SAFETY: a fresh private anonymous mapping, no address hint; checked below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err("a probe mapping could not be made".into());
    }
    let mapping = Mapping { base, len };
    let start = (mapping.base as usize).next_multiple_of(ALIGN);
    let region = start as *mut u8;
    // SAFETY: `start` lies in the mapping with PAGES pages after it (the mapping is two
    // alignments long), all readable and writable.
    let read = unsafe {
        std::ptr::write_volatile(region.add(3 * page), 1u8);
        std::ptr::read_volatile(region.add(7 * page))
    };
    let mut regions = [PageRegion::default(); 8];
    let mut arg = PmScanArg {
        size: size_of::<PmScanArg>() as u64,
        start: start as u64,
        end: (start + PAGES * page) as u64,
        vec: regions.as_mut_ptr() as u64,
        vec_len: regions.len() as u64,
        max_pages: PAGES as u64,
        category_inverted: PAGE_IS_PFNZERO | PAGE_IS_FILE,
        category_mask: PAGE_IS_WRITTEN | PAGE_IS_PRESENT | PAGE_IS_PFNZERO | PAGE_IS_FILE,
        ..PmScanArg::default()
    };
    // SAFETY: the ioctl reads `arg` and writes at most `vec_len` regions into `regions`,
    // both alive for the call; the fd is /proc/self/pagemap.
    let found = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
    drop(mapping);
    let _ = read;
    if found < 0 {
        return Err(format!(
            "the kernel has no PAGEMAP_SCAN ({})",
            std::io::Error::last_os_error()
        ));
    }
    let found = &regions[..usize::try_from(found).unwrap_or(0).min(regions.len())];
    let written = (start + 3 * page) as u64;
    let pages: u64 = found.iter().map(|r| (r.end - r.start) / page as u64).sum();
    if pages == 1 && found[0].start == written {
        Ok(())
    } else {
        Err(format!(
            "the kernel's page scan reported {pages} pages where one was written: an in-place reset would not be exact"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swap_device_rules_out_resident_slots_and_none_allows_them() {
        let header = "Filename\tType\tSize\tUsed\tPriority\n";
        assert_eq!(swap_devices(header), Ok(()));
        assert_eq!(swap_devices(""), Ok(()));
        let with = format!("{header}/swapfile file 1048572 0 -2\n");
        let why = swap_devices(&with).unwrap_err();
        assert!(why.contains("/swapfile"), "{why}");
    }

    #[test]
    fn a_forced_choice_is_taken_as_it_is_and_says_so() {
        assert!(decide(SlotChoice::Resident).resident());
        let decommit = decide(SlotChoice::Decommit);
        assert!(!decommit.resident());
        assert_eq!(decommit.reason, "plugin_slots: decommit");
    }
}
