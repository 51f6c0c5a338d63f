/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sandbox.c — the parent's side of preflight's decoding process (design in
 * sandbox.h): start sluice-decode with posix_spawn, hand it one answer and
 * its settings on a pipe, read the result on another, all against one
 * deadline; kill it when the deadline passes, start a new one when the
 * next answer comes.
 *
 * Writes use MSG-less pipes, so a process that dies mid-request would raise
 * SIGPIPE: every stage ignores it (stages/common.c), and the unit test
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sluice/sl_err.h"

struct sl_pf_sandbox {
  char path[PATH_MAX];
  long memory_mb, grace_ms;
  pid_t pid;    /* 0: no process */
  int to, from; /* its stdin and stdout, -1 without one */
};

#define PIPE_BYTES (1 << 20)

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
  sb->to = sb->from = -1;
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
  if (sb->to >= 0) close(sb->to);
  if (sb->from >= 0) close(sb->from);
  sb->to = sb->from = -1;
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

static int start(sl_pf_sandbox *sb, char *err, size_t errlen) {
  int in[2], out[2];
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
  /* an answer of megabytes in fewer, larger turns (best effort: the
   * system's pipe-max-size may refuse it) */
  fcntl(sb->to, F_SETPIPE_SZ, PIPE_BYTES);
  fcntl(sb->from, F_SETPIPE_SZ, PIPE_BYTES);
  return 0;
failed:
  snprintf(err, errlen, "starting %.200s: %s", sb->path, strerror(errno));
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

/* One exchange with a running process. 0 with r filled; SL_ETIMEDOUT;
 * SL_EIO (*sent: whether the whole request had gone out). */
static int exchange(sl_pf_sandbox *sb, const void *data, size_t len, const sl_pf_conf *c,
                    sl_pf_result *r, int64_t deadline, int *sent) {
  *sent = 0;
  sl_pf_wire_req req = {.magic = SL_PF_WIRE_MAGIC, .size = sizeof req, .len = len, .conf = *c};
  int rc = xfer(sb->to, 1, &req, sizeof req, deadline);
  if (rc == 0) rc = xfer(sb->to, 1, (void *)data, len, deadline);
  if (rc) return rc;
  *sent = 1;
  sl_pf_wire_resp resp;
  rc = xfer(sb->from, 0, &resp, sizeof resp, deadline);
  if (rc) return rc;
  /* the FLAC of max_seconds of 16-bit audio is smaller than the PCM */
  uint64_t most = (uint64_t)(c->max_seconds * SL_PF_RATE * 2) + (1u << 20);
  if (resp.magic != SL_PF_WIRE_MAGIC || resp.size != sizeof resp || resp.flac_len > most)
    return SL_EIO;
  r->rc = resp.rc;
  r->undecoded = resp.undecoded;
  r->duration_s = resp.duration_s;
  r->speech_s = resp.speech_s;
  r->peak_dbfs = resp.peak_dbfs;
  r->floor_dbfs = resp.floor_dbfs;
  resp.err[sizeof resp.err - 1] = '\0';
  snprintf(r->err, sizeof r->err, "%s", resp.err);
  if (resp.flac_len) {
    r->flac = malloc(resp.flac_len);
    if (!r->flac) return SL_ENOMEM;
    r->flac_len = resp.flac_len;
    rc = xfer(sb->from, 0, r->flac, r->flac_len, deadline);
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
