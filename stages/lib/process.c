/* SPDX-License-Identifier: Apache-2.0 */
/*
 * process.c — the process around a stage (see process.h): the stop flag
 * its signals raise, and its name as a lock owner.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/process.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

volatile sig_atomic_t sl__stop;

void sl__owner_id(char *buf, size_t len) {
  char host[32] = "";
  gethostname(host, sizeof host - 1);
  snprintf(buf, len, "%s:%ld", host, (long)getpid());
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
