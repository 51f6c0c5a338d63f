/*
 * common.c — start-up and shutdown shared by the stage mains: config and
 * logging, signals, the admin endpoint.
 */
#define _POSIX_C_SOURCE 200809L
#include "stages.h"

#include <stdio.h>
#include <string.h>

#include "sluice/sl_cli.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"

volatile sig_atomic_t sl__stop;

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

int sl__stage_start(int argc, char **argv, const char *stage, const char *summary,
                    sl_common_conf *cc, const sl_conf_bind *own, size_t nown,
                    const char *def_admin, sl_admin **admin) {
  sl_conf_bind binds[8];
  size_t nb = 0;
  binds[nb++] = (sl_conf_bind){sl_common_conf_table, sl_common_conf_table_len, cc};
  for (size_t i = 0; i < nown && nb < 8; i++) binds[nb++] = own[i];
  int rc = sl_cli_load(argc, argv, stage, summary, binds, nb);
  if (rc) return rc;
  if (sl_log_init(stage, cc->log_level) != 0) {
    fprintf(stderr, "sluice %s: log.level must be debug, info, warn or error\n", stage);
    sl__stage_finish(cc, own, nown, NULL);
    return 1002;
  }
  sl__install_signals();
  const char *listen = cc->admin_listen && *cc->admin_listen ? cc->admin_listen : def_admin;
  rc = sl_admin_start(admin, listen);
  if (rc) {
    sl_log(SL_LOG_ERROR, NULL, "admin endpoint %s: %s", listen, sl_strerror(rc));
    sl__stage_finish(cc, own, nown, NULL);
    return 1001;
  }
  sl_log(SL_LOG_INFO, NULL, "admin endpoint on http://%s (/healthz /readyz /metrics)",
         listen);
  return 0;
}

void sl__stage_finish(sl_common_conf *cc, const sl_conf_bind *own, size_t nown,
                      sl_admin *admin) {
  sl_admin_stop(admin);
  sl_conf_bind c = {sl_common_conf_table, sl_common_conf_table_len, cc};
  sl_conf_release(&c, 1);
  sl_conf_release(own, nown);
  sl_log(SL_LOG_INFO, NULL, "stopped");
}
