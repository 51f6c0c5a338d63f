/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_owner.c — sl__owner_id, the name a process holds Redis locks under
 * (ingest's sweep, erase's retention sweep, materialize's rebuild): two
 * processes must never share it, or both believe they hold one lock.
 *
 * Reproduced with the kernel's namespaces, as Kubernetes runs the stages:
 * each process is PID 1 of a PID namespace of its own and has the pod's
 * name as its host name (a UTS namespace), up to 63 bytes. Two replicas of
 * one Deployment differ only in the last characters of that name, and a
 * process on the host network (docker --network host) has the host's name
 * and may well be PID 1 too. Needs CAP_SYS_ADMIN (root): skipped without.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/process.h"

/* up to n bytes from fd, until its end: how many came */
static size_t read_all(int fd, char *buf, size_t n) {
  size_t got = 0;
  for (ssize_t k; got < n && (k = read(fd, buf + got, n - got)) > 0;) got += (size_t)k;
  return got;
}

/* The owner id of a process that is PID 1 of a new PID namespace with host
 * name host (a new UTS namespace), into out. 0, 1 when namespaces cannot
 * be made here (not root), -1 on another failure. */
static int owner_in_namespaces(const char *host, char out[SL__OWNER_MAX]) {
  int fd[2];
  if (pipe(fd) != 0) return -1;
  pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    close(fd[0]);
    char code = 'n';
    if (unshare(CLONE_NEWUTS | CLONE_NEWPID) != 0) {
      code = errno == EPERM ? 'p' : 'e';
      (void)!write(fd[1], &code, 1);
      _exit(0);
    }
    if (sethostname(host, strlen(host)) != 0) {
      code = 'e';
      (void)!write(fd[1], &code, 1);
      _exit(0);
    }
    pid_t first = fork(); /* PID 1 of the new namespace */
    if (first == 0) {
      char id[SL__OWNER_MAX];
      sl__owner_id(id, sizeof id);
      code = getpid() == 1 ? 'y' : 'e';
      (void)!write(fd[1], &code, 1);
      (void)!write(fd[1], id, sizeof id);
      _exit(0);
    }
    int st;
    if (first > 0) waitpid(first, &st, 0);
    _exit(0);
  }
  close(fd[1]);
  char code = 0;
  size_t n = read_all(fd[0], &code, 1);
  size_t got = code == 'y' ? read_all(fd[0], out, SL__OWNER_MAX) : 0;
  close(fd[0]);
  int st;
  waitpid(child, &st, 0);
  if (n == 1 && code == 'p') return 1;
  if (n != 1 || code != 'y' || got != SL__OWNER_MAX) return -1;
  out[SL__OWNER_MAX - 1] = '\0';
  return 0;
}

/* a pod's name as Kubernetes makes them: release-stage-<hash>-<suffix> */
#define POD_A "speaking-practice-sluice-materialize-7d9f8b6c4-x7k2p"
#define POD_B "speaking-practice-sluice-materialize-7d9f8b6c4-q2m9z"

static void test_pods_of_one_deployment(void **state) {
  (void)state;
  char a[SL__OWNER_MAX], b[SL__OWNER_MAX];
  int rc = owner_in_namespaces(POD_A, a);
  if (rc == 1) skip(); /* no CAP_SYS_ADMIN */
  assert_int_equal(rc, 0);
  assert_int_equal(owner_in_namespaces(POD_B, b), 0);
  /* the whole host name, then the PID: an operator reading a lock's holder
   * finds the pod */
  assert_non_null(strstr(a, POD_A ":1"));
  assert_non_null(strstr(b, POD_B ":1"));
  assert_string_not_equal(a, b);
}

static void test_same_host_same_pid(void **state) {
  (void)state;
  char a[SL__OWNER_MAX], b[SL__OWNER_MAX];
  int rc = owner_in_namespaces("sluice-node-1", a);
  if (rc == 1) skip();
  assert_int_equal(rc, 0);
  assert_int_equal(owner_in_namespaces("sluice-node-1", b), 0);
  assert_non_null(strstr(a, "sluice-node-1:1"));
  assert_string_not_equal(a, b); /* a salt of its own tells them apart */
}

static void test_longest_host_name(void **state) {
  (void)state;
  char host[64], id[SL__OWNER_MAX];
  memset(host, 'h', 63);
  host[63] = '\0';
  int rc = owner_in_namespaces(host, id);
  if (rc == 1) skip();
  assert_int_equal(rc, 0);
  assert_int_equal(strncmp(id, host, 63), 0);
  assert_int_equal(id[63], ':');
}

static void test_stable_within_a_process(void **state) {
  (void)state;
  char a[SL__OWNER_MAX], b[SL__OWNER_MAX];
  sl__owner_id(a, sizeof a);
  sl__owner_id(b, sizeof b);
  assert_string_equal(a, b); /* a lock taken under it is renewed under it */
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  pid_t child = fork(); /* a forked child is another process: its own id */
  assert_true(child >= 0);
  if (child == 0) {
    char c[SL__OWNER_MAX];
    sl__owner_id(c, sizeof c);
    (void)!write(fd[1], c, sizeof c);
    _exit(0);
  }
  close(fd[1]);
  char c[SL__OWNER_MAX] = "";
  size_t got = read_all(fd[0], c, sizeof c);
  close(fd[0]);
  int st;
  waitpid(child, &st, 0);
  assert_int_equal(got, sizeof c);
  c[sizeof c - 1] = '\0';
  assert_string_not_equal(a, c);
  char small[8];
  sl__owner_id(small, sizeof small); /* cut, never overrun */
  assert_int_equal(strlen(small), sizeof small - 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pods_of_one_deployment),
      cmocka_unit_test(test_same_host_same_pid),
      cmocka_unit_test(test_longest_host_name),
      cmocka_unit_test(test_stable_within_a_process),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
