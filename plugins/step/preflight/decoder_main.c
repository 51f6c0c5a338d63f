/* SPDX-License-Identifier: Apache-2.0 */
/*
 * decoder_main.c — sluice-decode, the process in which preflight decodes
 * (design in sandbox.h; the parent's side is sandbox.c).
 *
 *   sluice-decode [--memory-mb N]
 *
 * Reads requests (sl_pf_wire_req) on stdin and writes each result
 * (sl_pf_wire_resp) on stdout, until end of file. The answer's bytes are
 * in the memory file on descriptor 3 (SL_PF_WIRE_FD_RECORDING), which it
 * maps read-only for the answer (no copy, and no page of its own to fault
 * in); the FLAC goes into the memory file on descriptor 4
 * (SL_PF_WIRE_FD_FLAC) from offset 0, its length in the response. Before
 * the first, it gives up what a decoder exploit could use: every inherited
 * descriptor but 0 to 4; root (it becomes nobody); new privileges
 * (no_new_privs); sockets, new memory files and exec (a seccomp filter
 * makes socket(), memfd_create(), execve() and ptrace() fail, once
 * GStreamer has loaded its plugin registry; ptrace stays under
 * AddressSanitizer, whose leak check needs it); core dumps; and it limits
 * its address space (not under AddressSanitizer), its descriptors, the
 * size of any file it writes (RLIMIT_FSIZE, memory_mb: a memory file's
 * pages are memory outside its address space, and this keeps them within
 * the same limit; the parent checks each FLAC against its own, smaller
 * bound), and, answer by answer, its CPU time. SIGXFSZ is ignored: a write
 * past the limit fails (EFBIG) instead of killing the process (which also
 * means that a line for stderr, when stderr is a log file already larger
 * than memory_mb, is lost, not fatal). It asks the OOM killer to take it
 * first.
 * No new files or directories either (seccomp: open/openat with O_CREAT or
 * O_TMPFILE, creat, mkdir, mknod fail; openat2 is ENOSYS), so it cannot fill
 * a world-writable tmpfs. `sluice-decode --self-test` confines and seals
 * itself the same way, tries each of these, prints what it could do, and
 * exits 0 only when everything was refused (test_preflight runs it).
 * Not a program to run by hand otherwise: it answers only the wire of sandbox.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <math.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox.h"
#include "wire_io.h"
#include "sluice/sl_err.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define NOBODY 65534

static void die(const char *what) {
  fprintf(stderr, "sluice-decode: %s: %s\n", what, strerror(errno));
  exit(2);
}

/* the descriptors the parent gave it: regular (memory) files */
static void check_files(void) {
  int fds[] = {SL_PF_WIRE_FD_RECORDING, SL_PF_WIRE_FD_FLAC};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) {
    struct stat st;
    if (fstat(fds[i], &st) != 0 || !S_ISREG(st.st_mode)) {
      fprintf(stderr, "sluice-decode: descriptor %d is not the parent's memory file\n", fds[i]);
      exit(2);
    }
  }
}

static void confine(long memory_mb, int serving) {
  if (close_range(SL_PF_WIRE_FD_FLAC + 1, ~0u, 0) != 0) die("closing inherited descriptors");
  if (serving) check_files();
  struct rlimit none = {0, 0}, files = {64, 64};
  if (setrlimit(RLIMIT_CORE, &none) != 0 || setrlimit(RLIMIT_NOFILE, &files) != 0) die("setrlimit");
  if (memory_mb > 0 && !UNDER_ASAN) {
    struct rlimit as = {(rlim_t)memory_mb << 20, (rlim_t)memory_mb << 20};
    if (setrlimit(RLIMIT_AS, &as) != 0) die("setrlimit(RLIMIT_AS)");
  }
  if (signal(SIGXFSZ, SIG_IGN) == SIG_ERR) die("ignoring SIGXFSZ");
  if (memory_mb > 0) {
    struct rlimit fsize = {(rlim_t)memory_mb << 20, (rlim_t)memory_mb << 20};
    if (setrlimit(RLIMIT_FSIZE, &fsize) != 0) die("setrlimit(RLIMIT_FSIZE)");
  }
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (write(fd, "1000", 4) != 4) fprintf(stderr, "sluice-decode: oom_score_adj not set\n");
    close(fd);
  }
  if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setresgid(NOBODY, NOBODY, NOBODY) != 0 ||
                         setresuid(NOBODY, NOBODY, NOBODY) != 0))
    die("becoming nobody");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("no_new_privs");
}

/* O_TMPFILE without O_DIRECTORY: the bit that makes an unnamed file */
#define TMPFILE_BIT (O_TMPFILE & ~O_DIRECTORY)

/* after gst_init (which may run gst-plugin-scanner): no sockets, no new
 * memory files (each would be memory outside RLIMIT_AS), no new files or
 * directories anywhere (a world-writable tmpfs, /tmp or /dev/shm, is
 * memory too: RLIMIT_FSIZE bounds a file, not how many), no exec */
static void seal(void) {
  scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
  /* open and creat exist on x86_64, not on every architecture: a rule
   * libseccomp cannot place there is not needed there */
  if (f) {
    seccomp_rule_add(f, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(open), 1,
                     SCMP_A1(SCMP_CMP_MASKED_EQ, O_CREAT, O_CREAT));
    seccomp_rule_add(f, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(open), 1,
                     SCMP_A1(SCMP_CMP_MASKED_EQ, TMPFILE_BIT, TMPFILE_BIT));
    seccomp_rule_add(f, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(creat), 0);
    seccomp_rule_add(f, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(mkdir), 0);
  }
  if (!f ||
      seccomp_rule_add(f, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(openat), 1,
                       SCMP_A2(SCMP_CMP_MASKED_EQ, O_CREAT, O_CREAT)) != 0 ||
      seccomp_rule_add(f, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(openat), 1,
                       SCMP_A2(SCMP_CMP_MASKED_EQ, TMPFILE_BIT, TMPFILE_BIT)) != 0 ||
      /* openat2's flags are behind a pointer a filter cannot read: glibc's
       * open() does not use it, and ENOSYS makes a caller that does fall back */
      seccomp_rule_add(f, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(openat2), 0) != 0 ||
      seccomp_rule_add(f, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(mkdirat), 0) != 0 ||
      seccomp_rule_add(f, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(mknodat), 0) != 0 ||
      seccomp_rule_add(f, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 0) != 0 ||
      seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(memfd_create), 0) != 0 ||
      seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(execve), 0) != 0 ||
      seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(execveat), 0) != 0 ||
      /* LeakSanitizer stops the process's threads with ptrace at exit */
      (!UNDER_ASAN && seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ptrace), 0) != 0) ||
      seccomp_load(f) != 0) {
    fprintf(stderr, "sluice-decode: the seccomp filter could not be loaded\n");
    exit(2);
  }
  seccomp_release(f);
}

/* the CPU seconds this answer may use on top of what the process used */
static void cpu_budget(long timeout_ms) {
  struct rusage ru;
  struct rlimit cur;
  if (getrusage(RUSAGE_SELF, &ru) != 0 || getrlimit(RLIMIT_CPU, &cur) != 0) return;
  rlim_t used = (rlim_t)ru.ru_utime.tv_sec + (rlim_t)ru.ru_stime.tv_sec + 1;
  struct rlimit lim = {used + (rlim_t)ceil(timeout_ms / 1000.0) + 1, cur.rlim_max};
  if (lim.rlim_cur > lim.rlim_max) lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_CPU, &lim);
}

/* A memory file's mapping, kept from answer to answer: the pages stay
 * mapped, so an answer faults in none of the recording's and zeroes none
 * of the FLAC's (but for one larger than SL_PF_WIRE_KEEP_BYTES, whose
 * mapping goes after it; the parent empties that file). */
typedef struct {
  int fd, prot;
  void *p;
  size_t len;
} mapping;

static mapping recording = {SL_PF_WIRE_FD_RECORDING, PROT_READ, NULL, 0};
static mapping flac = {SL_PF_WIRE_FD_FLAC, PROT_READ | PROT_WRITE, NULL, 0};

static void unmap(mapping *m) {
  if (m->p) munmap(m->p, m->len);
  m->p = NULL;
  m->len = 0;
}

/* m's first want bytes, the file at least that large: the recording's
 * must be (the parent wrote it), the FLAC's is grown here (RLIMIT_FSIZE
 * bounds it). Only those bytes are touched, whatever the mapping's length.
 * The address, or NULL with errno (ENOMEM past RLIMIT_AS, EFBIG). */
static void *cover(mapping *m, size_t want) {
  static char none[1];
  if (want == 0) return none;
  struct stat st;
  if (fstat(m->fd, &st) != 0) return NULL;
  if (st.st_size < 0 || (uint64_t)st.st_size < want) {
    if (!(m->prot & PROT_WRITE)) {
      errno = EINVAL;
      return NULL;
    }
    if (ftruncate(m->fd, (off_t)want) != 0) return NULL;
  }
  if (m->p && m->len >= want) return m->p;
  unmap(m);
  void *p = mmap(NULL, want, m->prot, MAP_SHARED | MAP_POPULATE, m->fd, 0);
  if (p == MAP_FAILED) return NULL;
  m->p = p;
  m->len = want;
  return p;
}

/* the FLAC encoder's buffer (sl__pf_sink): the FLAC's file */
static void *grow_flac(void *ud, size_t cap) {
  (void)ud;
  return cover(&flac, cap);
}

static int serve_one(void) {
  sl_pf_wire_req req;
  int got = sl_pf_wire_read(STDIN_FILENO, &req, sizeof req);
  if (got == 1) return 1;
  if (got != 0 || req.magic != SL_PF_WIRE_MAGIC || req.size != sizeof req ||
      req.len > SL_PF_WIRE_MAX_INPUT) {
    fprintf(stderr, "sluice-decode: not a request of this build\n");
    return -1;
  }
  void *data = cover(&recording, req.len);
  sl_pf_wire_resp resp = {.magic = SL_PF_WIRE_MAGIC, .size = sizeof resp};
  sl_pf_result r = {0};
  if (!data && errno != ENOMEM) {
    fprintf(stderr, "sluice-decode: the recording's file holds less than %llu bytes\n",
            (unsigned long long)req.len);
    return -1;
  } else if (!data) {
    r.rc = SL_ENOMEM;
    snprintf(r.err, sizeof r.err, "out of memory for the recording's %llu bytes",
             (unsigned long long)req.len);
  } else {
    cpu_budget(req.conf.timeout_ms);
    const sl__pf_sink sink = {grow_flac, NULL};
    sl__pf_check_into(data, req.len, &req.conf, &sink, &r);
    r.flac = NULL; /* the file's, not the result's */
  }
  /* the encoder's buffer doubles: past the FLAC's bound (a FLAC over
   * half of it), the file is cut to the FLAC, as the parent requires */
  struct stat st;
  if (r.flac_len && fstat(SL_PF_WIRE_FD_FLAC, &st) == 0 &&
      (uint64_t)st.st_size > sl_pf_wire_flac_max(&req.conf) &&
      ftruncate(SL_PF_WIRE_FD_FLAC, (off_t)r.flac_len) != 0) {
    r.rc = SL_EIO;
    r.flac_len = 0;
    snprintf(r.err, sizeof r.err, "cutting the FLAC's file: %s", strerror(errno));
  }
  if (recording.len > SL_PF_WIRE_KEEP_BYTES) unmap(&recording);
  if (flac.len > SL_PF_WIRE_KEEP_BYTES) unmap(&flac);
  resp.rc = r.rc;
  resp.undecoded = r.undecoded;
  resp.duration_s = r.duration_s;
  resp.speech_s = r.speech_s;
  resp.peak_dbfs = r.peak_dbfs;
  resp.floor_dbfs = r.floor_dbfs;
  resp.timing = r.timing;
  resp.flac_s = r.flac_s;
  resp.nspans = r.nspans;
  memcpy(resp.spans, r.spans, sizeof resp.spans);
  resp.flac_len = r.flac_len;
  snprintf(resp.err, sizeof resp.err, "%s", r.err);
  int rc = sl_pf_wire_write(STDOUT_FILENO, &resp, sizeof resp) == 0 ? 0 : -1;
  sl_pf_result_clear(&r);
  return rc;
}

/* 1 (and a line naming it) when what the confinement forbids worked */
static int allowed(const char *what, int ok) {
  printf("%s: %s\n", what, ok ? "ALLOWED" : "denied");
  return ok;
}

/* --self-test: confined and sealed as when serving, tries what a decoder
 * exploit would (a socket, a memory file, a file or directory in each
 * world-writable directory, exec); 0 when every one was refused */
static int self_test(void) {
  int bad = 0, fd;
  bad |= allowed("socket", (fd = socket(AF_UNIX, SOCK_STREAM, 0)) >= 0);
  if (fd >= 0) close(fd);
  bad |= allowed("memfd_create", (fd = memfd_create("sluice-probe", 0)) >= 0);
  if (fd >= 0) close(fd);
  const char *dirs[] = {"/tmp", "/dev/shm", "/var/tmp"};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    char path[128], what[160];
    snprintf(path, sizeof path, "%s/sluice-decode-probe-%d", dirs[i], (int)getpid());
    snprintf(what, sizeof what, "a new file in %s", dirs[i]);
    bad |= allowed(what, (fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600)) >= 0);
    if (fd >= 0) {
      close(fd);
      unlink(path);
    }
    snprintf(what, sizeof what, "an unnamed file in %s", dirs[i]);
    bad |= allowed(what, (fd = open(dirs[i], O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600)) >= 0);
    if (fd >= 0) close(fd);
    snprintf(what, sizeof what, "a directory in %s", dirs[i]);
    int made = mkdir(path, 0700) == 0;
    bad |= allowed(what, made);
    if (made) rmdir(path);
  }
  fflush(stdout);
  char *const args[] = {"/bin/false", NULL};
  execve(args[0], args, NULL); /* returns only when refused */
  bad |= allowed("exec", 0);
  return bad ? 1 : 0;
}

int main(int argc, char **argv) {
  long memory_mb = 0;
  int probe = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--memory-mb") == 0 && i + 1 < argc) {
      memory_mb = strtol(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--self-test") == 0) {
      probe = 1;
    } else {
      fprintf(stderr,
              "usage: sluice-decode [--memory-mb N] [--self-test] (run by step/preflight)\n");
      return 2;
    }
  }
  if (!probe && isatty(STDIN_FILENO)) {
    fprintf(stderr, "sluice-decode: step/preflight runs this; it reads requests on a pipe\n");
    return 2;
  }
  confine(memory_mb, !probe);
  char err[256];
  if (sl_pf_init(err, sizeof err) != 0) {
    fprintf(stderr, "sluice-decode: %s\n", err);
    return 2;
  }
  seal();
  if (probe) return self_test();
  int rc;
  while ((rc = serve_one()) == 0) {
  }
  return rc == 1 ? 0 : 2;
}
