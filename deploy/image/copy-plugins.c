/*
 * The switchyard-plugins image's entrypoint: copies each /plugins/NAME.wasm into
 * /mnt/plugins/ (the pod's plugins volume), as `cp /plugins/NAME.wasm /mnt/plugins/` would for each,
 * without a shell. Built static (`gcc -static -Os`), once per architecture, so the image
 * needs nothing else and no compiler of the daemon. Exits non-zero, naming the file, on
 * any error, and when there is no plugin to copy.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *FROM = "/plugins";
static const char *TO = "/mnt/plugins";

static int copy(const char *name) {
  char from[4096], to[4096], buffer[65536];
  snprintf(from, sizeof from, "%s/%s", FROM, name);
  snprintf(to, sizeof to, "%s/%s", TO, name);
  int in = open(from, O_RDONLY);
  if (in < 0) { fprintf(stderr, "copy-plugins: %s: %s\n", from, strerror(errno)); return 1; }
  int out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out < 0) { fprintf(stderr, "copy-plugins: %s: %s\n", to, strerror(errno)); close(in); return 1; }
  ssize_t n;
  while ((n = read(in, buffer, sizeof buffer)) > 0) {
    if (write(out, buffer, (size_t)n) != n) {
      fprintf(stderr, "copy-plugins: %s: %s\n", to, strerror(errno)); close(in); close(out); return 1;
    }
  }
  int failed = n < 0 || close(out) != 0;
  if (failed) fprintf(stderr, "copy-plugins: %s: %s\n", from, strerror(errno));
  close(in);
  return failed;
}

int main(void) {
  DIR *dir = opendir(FROM);
  if (!dir) { fprintf(stderr, "copy-plugins: %s: %s\n", FROM, strerror(errno)); return 1; }
  struct dirent *entry;
  int copied = 0, failed = 0;
  while ((entry = readdir(dir))) {
    size_t len = strlen(entry->d_name);
    if (len <= 5 || strcmp(entry->d_name + len - 5, ".wasm") != 0) continue;
    if (copy(entry->d_name)) failed = 1; else copied++;
  }
  closedir(dir);
  if (!copied && !failed) { fprintf(stderr, "copy-plugins: no NAME.wasm in %s\n", FROM); return 1; }
  printf("copy-plugins: %d plugin(s) copied into %s\n", copied, TO);
  return failed;
}
