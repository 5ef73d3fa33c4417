// What the kernel's PAGEMAP_SCAN reports, and what one scan costs, for a plugin's linear
// memory as wasmtime's pool resets it in place (`linear_memory_keep_resident`): a region of
// 272 pages (the `noop` plugin's 1.06 MiB) in which 4 pages were written and the rest were
// (a) never touched or (b) read once, so they map the zero page. The region is 2 MiB-aligned,
// so one page table covers it: the kernel reports an unmapped page under a page table that
// exists as written, while it skips whole page tables that do not. Each is scanned with the
// categories wasmtime 50 asks for (written, not the zero page, not a file page) and with
// "present or swapped" required as well. Run with scripts/pagemap-scan.sh; Linux 6.7 or later.
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>

// From linux/fs.h (6.7), which older C library headers lack.
struct page_region {
  uint64_t start, end, categories;
};
struct pm_scan_arg {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages, category_inverted,
      category_mask, category_anyof_mask, return_mask;
};
#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#define PAGE_IS_WRITTEN (1 << 1)
#define PAGE_IS_FILE (1 << 2)
#define PAGE_IS_PRESENT (1 << 3)
#define PAGE_IS_SWAPPED (1 << 4)
#define PAGE_IS_PFNZERO (1 << 5)

#define PAGE 4096
#define PAGES 272
#define SCANS 100000

static int pagemap;

// Scans `len` bytes at `base`; returns how many pages it reported, or -1.
static long scan(char *base, size_t len, int need_present) {
  struct page_region regions[64];
  struct pm_scan_arg arg;
  memset(&arg, 0, sizeof arg);
  arg.size = sizeof arg;
  arg.start = (uint64_t)base;
  arg.end = (uint64_t)base + len;
  arg.vec = (uint64_t)regions;
  arg.vec_len = 64;
  arg.category_mask = PAGE_IS_WRITTEN | PAGE_IS_PFNZERO | PAGE_IS_FILE;
  arg.category_inverted = PAGE_IS_PFNZERO | PAGE_IS_FILE;
  if (need_present) arg.category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED;
  long n = ioctl(pagemap, PAGEMAP_SCAN, &arg);
  if (n < 0) return -1;
  long pages = 0;
  for (long i = 0; i < n; i++) pages += (long)((regions[i].end - regions[i].start) / PAGE);
  return pages;
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(void) {
  pagemap = open("/proc/self/pagemap", O_RDONLY);
  if (pagemap < 0) {
    perror("/proc/self/pagemap");
    return 1;
  }
  size_t len = (size_t)PAGES * PAGE;
  printf("| untouched pages | categories | pages reported (4 written) | one scan |\n");
  printf("|---|---|---|---|\n");
  for (int read_once = 0; read_once < 2; read_once++) {
    // 2 MiB-aligned, as a pool slot is, so that one page table covers the whole region.
    size_t span = 4u << 20;
    char *raw = mmap(0, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
      perror("mmap");
      return 1;
    }
    char *base = (char *)(((uintptr_t)raw + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1));
    if (read_once)
      for (size_t at = 0; at < len; at += PAGE) (void)*(volatile char *)(base + at);
    base[255 * PAGE] = 1;
    base[256 * PAGE] = 1;
    base[260 * PAGE] = 1;
    base[271 * PAGE] = 1;
    for (int need_present = 0; need_present < 2; need_present++) {
      long pages = scan(base, len, need_present);
      if (pages < 0) {
        perror("PAGEMAP_SCAN");
        return 1;
      }
      double start = now_ns();
      for (int i = 0; i < SCANS; i++) scan(base, len, need_present);
      double per_scan = (now_ns() - start) / SCANS;
      printf("| %s | %s | %ld | %.2f us |\n", read_once ? "read once (zero page)" : "never touched",
             need_present ? "written, and present or swapped" : "written (wasmtime 50)", pages,
             per_scan / 1000);
    }
    munmap(raw, span);
  }
  return 0;
}
