/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sandbox.c — the parent's side of preflight's decoding process (design in
 * sandbox.h): start sluice-decode with posix_spawn, hand it one answer and
 * its settings, take back the result, all against one deadline; kill it
 * when the deadline passes, start a new one when the next answer comes.
 *
 * The answer's bytes and the FLAC do not go through the pipes: each
 * process has two memory files (memfd_create), made here at its start and
 * given to it as descriptors 3 and 4. The recording is written into the
 * first (read-only for it: it maps it), the FLAC comes back in the second
 * (it writes it there); the pipes carry only the request and response
 * structs, and they are what the deadline waits on. Both files are kept
 * and reused from answer to answer (their pages stay allocated and mapped
 * in the process: an answer zeroes and faults in none of them), but for
 * one larger than SL_PF_WIRE_KEEP_BYTES, which is emptied after its
 * answer. Measured (docs/benchmarks.md), the pipes cost the decoding
 * process more than the copies: a fresh 2.9 MB buffer per answer, faulted
 * in page by page (~1,900 page faults per answer of a 90 s WAV).
 *
 * The process is hostile once it has decoded a stranger's bytes, and it
 * can do what it likes to both files (reopen the first read-write through
 * /proc/self/fd, truncate or grow the second), so this side
 *   - never maps them: it writes with pwrite and reads with pread, so no
 *     truncation by the other side can raise SIGBUS here;
 *   - never reads the first back;
 *   - believes a FLAC length only when it is within the bound of this
 *     answer (max_seconds of 16-bit audio and 1 MiB) and within the
 *     file's size (fstat), and the file itself is no larger than that
 *     bound: otherwise the process is killed (SL_ETIMEDOUT, as a process
 *     that broke its limits) and its files closed with it;
 *   - reads exactly that many bytes, and a short read (a file truncated
 *     under it) is the same failure.
 * What it can write to them is bounded on its side (RLIMIT_FSIZE,
 * decoder_main.c), so they cannot hold more memory than its limit.
 *
 * Writes use MSG-less pipes, so a process that dies mid-request would raise
 * SIGPIPE: every stage ignores it (stages/lib/process.c), and the unit test
 * does too; a write then fails with EPIPE, which is handled.
 */
#define _GNU_SOURCE
#include "sandbox.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sluice/sl_err.h"

struct sl_pf_sandbox {
  char path[PATH_MAX];
  long memory_mb, grace_ms;
  pid_t pid;    /* 0: no process */
  int to, from; /* its stdin and stdout, -1 without one */
  int rec, out; /* the recording's and the FLAC's files (its 3 and 4), -1 */
};

#define PIPE_BYTES (64 << 10)

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* lib/sluice/sluice-decode beside lib/sluice/plugins/step-preflight.so */
static int default_path(char *buf, size_t cap) {
  Dl_info di;
  if (!dladdr((void *)default_path, &di) || !di.dli_fname) return -1;
  char *dir = strdup(di.dli_fname);
  if (!dir) return -1;
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  int n = snprintf(buf, cap, "%s/sluice-decode", slash ? dir : ".");
  free(dir);
  return n > 0 && (size_t)n < cap ? 0 : -1;
}

int sl_pf_sandbox_new(const sl_pf_sandbox_conf *c, sl_pf_sandbox **out, char *err, size_t errlen) {
  *out = NULL;
  sl_pf_sandbox *sb = calloc(1, sizeof *sb);
  if (!sb) return SL_ENOMEM;
  sb->to = sb->from = sb->rec = sb->out = -1;
  sb->memory_mb = c->memory_mb;
  sb->grace_ms = c->grace_ms > 0 ? c->grace_ms : 2000;
  int rc =
      c->path && c->path[0]
          ? (snprintf(sb->path, sizeof sb->path, "%s", c->path) < (int)sizeof sb->path ? 0 : -1)
          : default_path(sb->path, sizeof sb->path);
  if (rc || access(sb->path, X_OK) != 0) {
    snprintf(err, errlen, "the decoding program %.200s is not there or not executable",
             sb->path[0] ? sb->path : "sluice-decode");
    free(sb);
    return SL_ENOTFOUND;
  }
  *out = sb;
  return 0;
}

pid_t sl_pf_sandbox_pid(const sl_pf_sandbox *sb) { return sb ? sb->pid : 0; }

/* Ends the process (SIGKILL unless it already died) and reaps it. The
 * reason it ended goes to why (when given). */
static void stop(sl_pf_sandbox *sb, char *why, size_t whylen) {
  int *fds[] = {&sb->to, &sb->from, &sb->rec, &sb->out};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) {
    if (*fds[i] >= 0) close(*fds[i]);
    *fds[i] = -1;
  }
  if (!sb->pid) return;
  int status = 0;
  pid_t got = waitpid(sb->pid, &status, WNOHANG);
  if (got == 0) {
    kill(sb->pid, SIGKILL);
    got = waitpid(sb->pid, &status, 0);
    if (why) snprintf(why, whylen, "stopped");
  } else if (why && got == sb->pid && WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    snprintf(why, whylen, "killed by signal %d (%s)%s", sig, strsignal(sig),
             sig == SIGKILL   ? ": over its memory limit?"
             : sig == SIGXCPU ? ": over its CPU time"
                              : "");
  } else if (why && got == sb->pid && WIFEXITED(status)) {
    snprintf(why, whylen, "exited with status %d", WEXITSTATUS(status));
  }
  sb->pid = 0;
}

/* The two memory files of a new process: rec (here read-write; *rec_ro
 * the read-only descriptor it gets) and out. 0 or -1 (errno). */
static int memfiles(sl_pf_sandbox *sb, int *rec_ro) {
  char path[64];
  sb->rec = memfd_create("sluice-recording", MFD_CLOEXEC);
  sb->out = memfd_create("sluice-flac", MFD_CLOEXEC);
  if (sb->rec < 0 || sb->out < 0) return -1;
  snprintf(path, sizeof path, "/proc/self/fd/%d", sb->rec);
  *rec_ro = open(path, O_RDONLY | O_CLOEXEC);
  return *rec_ro >= 0 ? 0 : -1;
}

static int start(sl_pf_sandbox *sb, char *err, size_t errlen) {
  int in[2], out[2], rec_ro = -1;
  if (memfiles(sb, &rec_ro) != 0) goto failed;
  if (pipe2(in, O_CLOEXEC) != 0) goto failed;
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    goto failed;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, rec_ro, SL_PF_WIRE_FD_RECORDING);
  posix_spawn_file_actions_adddup2(&fa, sb->out, SL_PF_WIRE_FD_FLAC);
  char mem[32];
  snprintf(mem, sizeof mem, "%ld", sb->memory_mb);
  char *argv[] = {sb->path, "--memory-mb", mem, NULL};
  /* an empty environment but for the sanitizers' own settings */
  static const char *const keep[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"};
  char *envp[8];
  char envbuf[3][512];
  int ne = 0;
  envp[ne++] = "MALLOC_ARENA_MAX=2";
  for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
    const char *v = getenv(keep[i]);
    if (v && snprintf(envbuf[i], sizeof envbuf[i], "%s=%s", keep[i], v) < (int)sizeof envbuf[i])
      envp[ne++] = envbuf[i];
  }
  envp[ne] = NULL;
  pid_t pid;
  int rc = posix_spawn(&pid, sb->path, &fa, NULL, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  close(rec_ro);
  rec_ro = -1;
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    errno = rc;
    goto failed;
  }
  sb->pid = pid;
  sb->to = in[1];
  sb->from = out[0];
  fcntl(sb->to, F_SETFL, O_NONBLOCK);
  fcntl(sb->from, F_SETFL, O_NONBLOCK);
  /* the structs only: a request and a response fit at once */
  fcntl(sb->to, F_SETPIPE_SZ, PIPE_BYTES);
  fcntl(sb->from, F_SETPIPE_SZ, PIPE_BYTES);
  return 0;
failed:
  snprintf(err, errlen, "starting %.200s: %s", sb->path, strerror(errno));
  if (rec_ro >= 0) close(rec_ro);
  stop(sb, NULL, 0);
  return SL_EIO;
}

/* Moves len bytes to (write) or from (!write) fd by the deadline.
 * 0; SL_ETIMEDOUT at the deadline; SL_EIO when the other end is gone. */
static int xfer(int fd, int write_, void *buf, size_t len, int64_t deadline) {
  char *p = buf;
  while (len) {
    ssize_t n = write_ ? write(fd, p, len) : read(fd, p, len);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == 0 && !write_) return SL_EIO; /* end of file: it is gone */
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return SL_EIO;
    int64_t left = deadline - now_ms();
    if (left <= 0) return SL_ETIMEDOUT;
    struct pollfd pf = {.fd = fd, .events = write_ ? POLLOUT : POLLIN};
    if (poll(&pf, 1, left > INT_MAX ? INT_MAX : (int)left) < 0 && errno != EINTR) return SL_EIO;
  }
  return 0;
}

/* all of len bytes of data into fd from offset 0: 0 or SL_EIO */
static int put(int fd, const void *data, size_t len) {
  const char *p = data;
  for (off_t at = 0; len;) {
    ssize_t n = pwrite(fd, p, len, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return SL_EIO;
    p += n;
    at += n;
    len -= (size_t)n;
  }
  return 0;
}

/* The FLAC the process wrote into sb->out: len bytes, believed only within
 * most and within the file, whose size must be within most too. 0 with
 * r->flac set; SL_ENOMEM; SL_EPARSE for a process that broke the wire. */
static int take_flac(sl_pf_sandbox *sb, uint64_t len, uint64_t most, sl_pf_result *r) {
  struct stat st;
  if (len > most || fstat(sb->out, &st) != 0 || st.st_size < 0 || (uint64_t)st.st_size > most ||
      (uint64_t)st.st_size < len)
    return SL_EPARSE;
  r->flac = malloc(len);
  if (!r->flac) return SL_ENOMEM;
  r->flac_len = len;
  char *p = r->flac;
  for (off_t at = 0; len;) {
    ssize_t n = pread(sb->out, p, len, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return SL_EPARSE; /* truncated under us */
    p += n;
    at += n;
    len -= (size_t)n;
  }
  return 0;
}

/* the measures a decoder reported are within what a recording can give:
 * it handled a stranger's bytes, and its numbers go on into messages */
static int measures_sane(const sl_pf_wire_resp *w) {
  const sl_pf_timing *t = &w->timing;
  double d = w->duration_s;
  if (!(d >= 0 && d <= 1e7) || !(w->speech_s >= 0 && w->speech_s <= d + 1) ||
      !(w->flac_s >= 0 && w->flac_s <= d + 1))
    return 0;
  const double s[] = {t->speaking_s, t->pause_total_s, t->pause_mean_s, t->pause_longest_s,
                      t->run_mean_s};
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
    if (!(s[i] >= 0 && s[i] <= d + 1)) return 0; /* NaN fails too */
  if ((double)t->pauses > d * 1000.0 / SL_PF_PAUSE_MIN_MS + 1) return 0;
  /* the pauses' places: no more than the pauses, in order, inside the FLAC */
  if (w->nspans > SL_PF_MAX_SPANS || w->nspans > t->pauses) return 0;
  for (uint32_t i = 0; i < w->nspans; i++) {
    double from = w->spans[i][0], to = w->spans[i][1];
    if (!(from >= (i ? w->spans[i - 1][1] : 0.0f) && to > from && to <= w->flac_s + 0.02)) return 0;
  }
  return t->runs == (t->pauses ? t->pauses + 1 : t->runs) && t->runs <= t->pauses + 1;
}

/* One exchange with a running process. 0 with r filled; SL_ETIMEDOUT;
 * SL_EIO (*sent: whether the whole request had gone out); SL_EPARSE (a
 * response outside the wire's bounds); SL_ENOMEM. */
static int exchange(sl_pf_sandbox *sb, const void *data, size_t len, const sl_pf_conf *c,
                    sl_pf_result *r, int64_t deadline, int *sent) {
  *sent = 0;
  sl_pf_wire_req req = {.magic = SL_PF_WIRE_MAGIC, .size = sizeof req, .len = len, .conf = *c};
  if (put(sb->rec, data, len) != 0) return SL_EIO;
  int rc = xfer(sb->to, 1, &req, sizeof req, deadline);
  if (rc) return rc;
  *sent = 1;
  sl_pf_wire_resp resp;
  rc = xfer(sb->from, 0, &resp, sizeof resp, deadline);
  if (rc) return rc;
  if (resp.magic != SL_PF_WIRE_MAGIC || resp.size != sizeof resp) return SL_EPARSE;
  if (!measures_sane(&resp)) return SL_EPARSE;
  r->rc = resp.rc;
  r->undecoded = resp.undecoded;
  r->duration_s = resp.duration_s;
  r->speech_s = resp.speech_s;
  r->peak_dbfs = resp.peak_dbfs;
  r->floor_dbfs = resp.floor_dbfs;
  r->timing = resp.timing;
  r->flac_s = resp.flac_s;
  r->nspans = resp.nspans;
  memcpy(r->spans, resp.spans, sizeof r->spans);
  resp.err[sizeof resp.err - 1] = '\0';
  snprintf(r->err, sizeof r->err, "%s", resp.err);
  if (resp.flac_len) rc = take_flac(sb, resp.flac_len, sl_pf_wire_flac_max(c), r);
  /* a large recording or FLAC is not kept in memory between answers */
  int fds[] = {sb->rec, sb->out};
  for (size_t i = 0; rc == 0 && i < sizeof fds / sizeof fds[0]; i++) {
    struct stat st;
    if (fstat(fds[i], &st) != 0 ||
        ((uint64_t)st.st_size > SL_PF_WIRE_KEEP_BYTES && ftruncate(fds[i], 0) != 0))
      rc = SL_EIO;
  }
  return rc;
}

int sl_pf_sandbox_check(sl_pf_sandbox *sb, const void *data, size_t len, const sl_pf_conf *c,
                        sl_pf_result *r) {
  memset(r, 0, sizeof *r);
  if (len > SL_PF_WIRE_MAX_INPUT) {
    snprintf(r->err, sizeof r->err, "the recording is larger than the decoder takes");
    return r->rc = SL_EUNSUPPORTED;
  }
  long timeout_ms = c->timeout_ms > 0 ? c->timeout_ms : 30000;
  int64_t deadline = now_ms() + timeout_ms + sb->grace_ms;
  /* a process that died between answers is found out at the write: the
   * answer goes to a new one, once */
  for (int attempt = 0;; attempt++) {
    if (!sb->pid) {
      int rc = start(sb, r->err, sizeof r->err);
      if (rc) return r->rc = rc;
    }
    int sent = 0, rc = exchange(sb, data, len, c, r, deadline, &sent);
    if (rc == 0) return r->rc;
    char why[160] = "";
    stop(sb, why, sizeof why);
    sl_pf_result_clear(r);
    if (rc == SL_EIO && !sent && attempt == 0) continue;
    if (rc == SL_ETIMEDOUT)
      snprintf(r->err, sizeof r->err, "decoding took longer than %ld ms: the decoder was %s",
               timeout_ms, why[0] ? why : "stopped");
    else if (rc == SL_ENOMEM)
      snprintf(r->err, sizeof r->err, "out of memory for the decoder's result");
    else if (rc == SL_EPARSE)
      snprintf(r->err, sizeof r->err,
               "the decoder broke the wire (a response or FLAC outside its bounds): it was %s",
               why[0] ? why : "stopped");
    else
      snprintf(r->err, sizeof r->err, "the decoder ended %s: %s",
               sent ? "before it answered" : "before it took the recording",
               why[0] ? why : "its pipe closed");
    /* a process that ended on this answer ended because of it */
    return r->rc = rc == SL_EIO && !sent ? SL_EIO : rc == SL_ENOMEM ? SL_ENOMEM : SL_ETIMEDOUT;
  }
}

void sl_pf_sandbox_free(sl_pf_sandbox *sb) {
  if (!sb) return;
  stop(sb, NULL, 0);
  free(sb);
}
