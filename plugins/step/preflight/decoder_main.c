/* SPDX-License-Identifier: Apache-2.0 */
/*
 * decoder_main.c — sluice-decode, the process in which preflight decodes
 * (design in sandbox.h; the parent's side is sandbox.c).
 *
 *   sluice-decode [--memory-mb N]
 *
 * Reads requests (sl_pf_wire_req and the answer's bytes) on stdin and
 * writes each result (sl_pf_wire_resp and the FLAC) on stdout, until end
 * of file. Before the first, it gives up what a decoder exploit could use:
 * every inherited descriptor but 0, 1 and 2; root (it becomes nobody);
 * new privileges (no_new_privs); sockets and exec (a seccomp filter makes
 * socket(), execve() and ptrace() fail, once GStreamer has loaded its
 * plugin registry; ptrace stays under AddressSanitizer, whose leak check
 * needs it); core dumps; and it limits its address space (not
 * under AddressSanitizer), its descriptors, and, answer by answer, its CPU
 * time. It asks the OOM killer to take it first. Not a program to run by
 * hand: it answers only the wire of sandbox.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <math.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sandbox.h"
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

/* all of n bytes, 0; 1 at a clean end of file before any; -1 otherwise */
static int read_all(int fd, void *buf, size_t n) {
  char *p = buf;
  size_t got = 0;
  while (got < n) {
    ssize_t k = read(fd, p + got, n - got);
    if (k == 0) return got == 0 ? 1 : -1;
    if (k < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    got += (size_t)k;
  }
  return 0;
}

static int write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static void confine(long memory_mb) {
  if (close_range(3, ~0u, 0) != 0) die("closing inherited descriptors");
  struct rlimit none = {0, 0}, files = {64, 64};
  if (setrlimit(RLIMIT_CORE, &none) != 0 || setrlimit(RLIMIT_NOFILE, &files) != 0) die("setrlimit");
  if (memory_mb > 0 && !UNDER_ASAN) {
    struct rlimit as = {(rlim_t)memory_mb << 20, (rlim_t)memory_mb << 20};
    if (setrlimit(RLIMIT_AS, &as) != 0) die("setrlimit(RLIMIT_AS)");
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

/* after gst_init (which may run gst-plugin-scanner): no sockets, no exec */
static void seal(void) {
  scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
  if (!f || seccomp_rule_add(f, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 0) != 0 ||
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

static int serve_one(void) {
  sl_pf_wire_req req;
  int got = read_all(STDIN_FILENO, &req, sizeof req);
  if (got == 1) return 1;
  if (got != 0 || req.magic != SL_PF_WIRE_MAGIC || req.size != sizeof req ||
      req.len > SL_PF_WIRE_MAX_INPUT) {
    fprintf(stderr, "sluice-decode: not a request of this build\n");
    return -1;
  }
  void *data = malloc(req.len ? req.len : 1);
  sl_pf_wire_resp resp = {.magic = SL_PF_WIRE_MAGIC, .size = sizeof resp};
  sl_pf_result r = {0};
  if (!data) { /* take the bytes all the same, then say why */
    char sink[65536];
    for (uint64_t left = req.len; left;) {
      size_t n = left < sizeof sink ? (size_t)left : sizeof sink;
      if (read_all(STDIN_FILENO, sink, n) != 0) return -1;
      left -= n;
    }
    r.rc = SL_ENOMEM;
    snprintf(r.err, sizeof r.err, "out of memory for the recording's %llu bytes",
             (unsigned long long)req.len);
  } else if (read_all(STDIN_FILENO, data, req.len) != 0) {
    free(data);
    return -1;
  } else {
    cpu_budget(req.conf.timeout_ms);
    sl_pf_check(data, req.len, &req.conf, &r);
  }
  free(data);
  resp.rc = r.rc;
  resp.undecoded = r.undecoded;
  resp.duration_s = r.duration_s;
  resp.speech_s = r.speech_s;
  resp.peak_dbfs = r.peak_dbfs;
  resp.floor_dbfs = r.floor_dbfs;
  resp.flac_len = r.flac_len;
  snprintf(resp.err, sizeof resp.err, "%s", r.err);
  int rc = write_all(STDOUT_FILENO, &resp, sizeof resp) == 0 &&
                   (!r.flac_len || write_all(STDOUT_FILENO, r.flac, r.flac_len) == 0)
               ? 0
               : -1;
  sl_pf_result_clear(&r);
  return rc;
}

int main(int argc, char **argv) {
  long memory_mb = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--memory-mb") == 0 && i + 1 < argc) {
      memory_mb = strtol(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "usage: sluice-decode [--memory-mb N] (run by step/preflight)\n");
      return 2;
    }
  }
  if (isatty(STDIN_FILENO)) {
    fprintf(stderr, "sluice-decode: step/preflight runs this; it reads requests on a pipe\n");
    return 2;
  }
  confine(memory_mb);
  char err[256];
  if (sl_pf_init(err, sizeof err) != 0) {
    fprintf(stderr, "sluice-decode: %s\n", err);
    return 2;
  }
  seal();
  int rc;
  while ((rc = serve_one()) == 0) {
  }
  return rc == 1 ? 0 : 2;
}
