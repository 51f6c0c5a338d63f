/* SPDX-License-Identifier: Apache-2.0 */
/*
 * process.c — the process around a stage (see process.h): the stop flag
 * its signals raise, and its name as a lock owner.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/process.h"

#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t sl__stop;

static pthread_mutex_t owner_mu = PTHREAD_MUTEX_INITIALIZER;
static char owner[SL__OWNER_MAX];
static pid_t owner_pid; /* whose owner is made: a forked child makes its own */

static void owner_make(void) {
  char host[72] = ""; /* HOST_NAME_MAX (64) and its NUL */
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
  unsigned salt;
  if (RAND_bytes((unsigned char *)&salt, sizeof salt) != 1) { /* no entropy: the clock */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    salt = (unsigned)ts.tv_nsec ^ (unsigned)ts.tv_sec ^ ((unsigned)getpid() << 16);
  }
  owner_pid = getpid();
  snprintf(owner, sizeof owner, "%.64s:%ld.%08x", host, (long)owner_pid, salt);
}

void sl__owner_id(char *buf, size_t len) {
  pthread_mutex_lock(&owner_mu);
  if (owner_pid != getpid()) owner_make();
  snprintf(buf, len, "%s", owner);
  pthread_mutex_unlock(&owner_mu);
}

static void on_signal(int sig) {
  (void)sig;
  sl__stop = 1;
}

void sl__install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
}
