/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tools/k8s/pause.c - the pod sandbox ("pause") container of tools/k8s's test
 * cluster. The registry that serves registry.k8s.io/pause is not reachable
 * here, so tools/k8s builds this static program into an image FROM scratch
 * and gives containerd its name as `sandbox_image`.
 *
 * What a sandbox process must do: hold the pod's namespaces open (by being
 * alive), reap the zombies of the pod when it is PID 1 of a shared PID
 * namespace, and exit promptly on SIGINT/SIGTERM.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("sluice pause 1");
    return 0;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_stop;
  if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) return 1;
  sa.sa_handler = on_child;
  sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  if (sigaction(SIGCHLD, &sa, NULL) != 0) return 2;
  for (;;) pause();
}
