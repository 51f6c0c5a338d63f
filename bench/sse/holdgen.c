/* SPDX-License-Identifier: Apache-2.0 */
/* bench/sse/holdgen.c — opens and holds server-sent event streams.
 *
 * N TCP connections to 127.0.0.1:PORT, each sending GET PATH with the given
 * bearer token, are opened (at most 256 connecting at once) and held until
 * each has received its response head and first event (a blank line after
 * "data:"); then one line goes to stdout and the streams are held for
 * HOLD_S seconds (the caller measures the server meanwhile), counting the
 * streams the server closed. One thread, poll(2). Loopback targets only.
 *
 * Usage: holdgen PORT PATH TOKEN N HOLD_S
 * Output: {"streams":N,"open":n,"refused":n,"open_s":..,"closed_while_held":n}
 * (refused: a status other than 200 or a connection error.)
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "sl_bench.h"

enum { CONNECTING, SENT, OPEN, DEAD };

typedef struct {
  int fd, state;
  char buf[512];
  size_t len;
} conn;

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: holdgen PORT PATH TOKEN N HOLD_S\n");
    return 2;
  }
  int port = atoi(argv[1]), n = atoi(argv[4]);
  double hold = atof(argv[5]);
  if (n < 1 || n > 100000 || port < 1) return 2;
  char req[1024];
  int rl = snprintf(req, sizeof req,
                    "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
                    "Authorization: Bearer %s\r\n\r\n",
                    argv[2], argv[3]);
  conn *c = calloc((size_t)n, sizeof *c);
  struct pollfd *pf = calloc((size_t)n, sizeof *pf);
  if (!c || !pf || rl <= 0 || (size_t)rl >= sizeof req) return 1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  int started = 0, open = 0, refused = 0, pending = 0;
  double t0 = sl_bench_now_s();
  while (open + refused < n) {
    while (started < n && pending < 256) { /* a bounded number connecting at once */
      conn *k = &c[started++];
      k->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      if (k->fd < 0 ||
          (connect(k->fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS)) {
        k->state = DEAD;
        refused++;
        continue;
      }
      k->state = CONNECTING;
      pending++;
    }
    int m = 0;
    for (int i = 0; i < started; i++)
      if (c[i].state == CONNECTING || c[i].state == SENT) {
        pf[m].fd = c[i].fd;
        pf[m].events = c[i].state == CONNECTING ? POLLOUT : POLLIN;
        pf[m].revents = 0;
        m++;
      }
    if (m == 0) continue;
    if (poll(pf, (nfds_t)m, 10000) <= 0) break;
    for (int j = 0, i = 0; j < m; j++) {
      while (c[i].fd != pf[j].fd || (c[i].state != CONNECTING && c[i].state != SENT)) i++;
      conn *k = &c[i];
      if (!pf[j].revents) continue;
      if (k->state == CONNECTING) {
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err || write(k->fd, req, (size_t)rl) != rl) {
          k->state = DEAD, refused++, pending--;
          continue;
        }
        k->state = SENT;
        continue;
      }
      ssize_t r = read(k->fd, k->buf + k->len, sizeof k->buf - 1 - k->len);
      if (r <= 0) {
        k->state = DEAD, refused++, pending--;
        continue;
      }
      k->len += (size_t)r;
      k->buf[k->len] = '\0';
      if (strncmp(k->buf, "HTTP/1.1 200", 12) != 0 && k->len >= 12) {
        k->state = DEAD, refused++, pending--;
        continue;
      }
      if (strstr(k->buf, "data:") && strstr(strstr(k->buf, "data:"), "\n\n")) {
        k->state = OPEN, open++, pending--;
      } else if (k->len == sizeof k->buf - 1) {
        k->len = 0; /* the head and events so far: keep reading */
      }
    }
  }
  double open_s = sl_bench_now_s() - t0;
  printf("{\"streams\":%d,\"open\":%d,\"refused\":%d,\"open_s\":%.3f", n, open, refused, open_s);
  fflush(stdout);
  /* hold: read (and drop) heartbeats; count streams the server closes */
  int closed = 0;
  double end = sl_bench_now_s() + hold;
  char sink[4096];
  while (sl_bench_now_s() < end) {
    int m = 0;
    for (int i = 0; i < n; i++)
      if (c[i].state == OPEN) {
        pf[m].fd = c[i].fd;
        pf[m].events = POLLIN;
        pf[m].revents = 0;
        m++;
      }
    if (m == 0 || poll(pf, (nfds_t)m, 500) < 0) break;
    for (int j = 0, i = 0; j < m; j++) {
      while (c[i].fd != pf[j].fd || c[i].state != OPEN) i++;
      if (pf[j].revents && read(c[i].fd, sink, sizeof sink) <= 0) {
        c[i].state = DEAD;
        closed++;
      }
    }
  }
  printf(",\"closed_while_held\":%d}\n", closed);
  for (int i = 0; i < n; i++)
    if (c[i].fd > 0) close(c[i].fd);
  free(c);
  free(pf);
  return 0;
}
