/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trickle_server.c — a deliberately slow HTTP server for bad-input tests.
 *
 * Usage: trickle_server PORT INTERVAL_MS
 * Listens on 127.0.0.1:PORT; for every connection it reads the request
 * headers (and whatever body arrives), answers "200 OK" with a JSON body of
 * 4096 declared bytes, then sends one byte every INTERVAL_MS — a provider
 * trickling its reply, so a client's whole-transfer timeout must fire.
 * One connection at a time; runs until killed.
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: trickle_server PORT INTERVAL_MS\n");
    return 2;
  }
  int port = atoi(argv[1]);
  long interval = atol(argv[2]);
  if (port <= 0 || port > 65535 || interval <= 0) {
    fprintf(stderr, "trickle_server: bad port or interval\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  int s = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 16)) {
    perror("trickle_server");
    return 1;
  }
  fprintf(stderr, "trickle_server: listening on 127.0.0.1:%d\n", port);
  for (;;) {
    int c = accept(s, NULL, NULL);
    if (c < 0) continue;
    char buf[65536];
    size_t got = 0;
    while (got < sizeof buf - 1) { /* until the end of the headers */
      ssize_t n = read(c, buf + got, sizeof buf - 1 - got);
      if (n <= 0) break;
      got += (size_t)n;
      buf[got] = '\0';
      if (strstr(buf, "\r\n\r\n")) break;
    }
    const char *head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                       "Content-Length: 4096\r\n\r\n{\"text\": \"";
    if (write(c, head, strlen(head)) < 0) {
      close(c);
      continue;
    }
    struct timespec ts = {interval / 1000, (interval % 1000) * 1000000L};
    for (int i = 0; i < 4096; i++) {
      nanosleep(&ts, NULL);
      if (write(c, "a", 1) != 1) break; /* the client gave up */
    }
    close(c);
  }
}
