/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_callback.c — the callback URL policy (stages/lib/callback.h):
 * the allow-list of hosts, URL form, and the address classes refused
 * unless callback.allowed_addresses covers them (loopback, private,
 * link-local, metadata, IPv4 mapped into IPv6). Name resolution itself is
 * exercised by tests/integration/test_notify.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "lib/callback.h"
#include "sluice/sl_err.h"

static sl__callback_policy *policy(const char *hosts, const char *addrs, int http) {
  sl__callback_conf c = {(char *)hosts, (char *)addrs, http};
  sl__callback_policy *p = NULL;
  char err[256];
  assert_int_equal(sl__callback_policy_new(&p, &c, err, sizeof err), 0);
  return p;
}

static int url(const sl__callback_policy *p, const char *u, char *why) {
  sl__callback_target t;
  return sl__callback_check_url(p, u, &t, why, 320);
}

static int addr(const sl__callback_policy *p, const char *a, char *why) {
  struct sockaddr_in v4 = {.sin_family = AF_INET};
  struct sockaddr_in6 v6 = {.sin6_family = AF_INET6};
  if (inet_pton(AF_INET, a, &v4.sin_addr) == 1)
    return sl__callback_check_addr(p, (struct sockaddr *)&v4, why, 320);
  assert_int_equal(inet_pton(AF_INET6, a, &v6.sin6_addr), 1);
  return sl__callback_check_addr(p, (struct sockaddr *)&v6, why, 320);
}

static void hosts_and_form(void **state) {
  (void)state;
  char why[320];
  sl__callback_policy *p = policy("hooks.example.com, *.example.org", "", 0);
  sl__callback_target t;
  assert_int_equal(
      sl__callback_check_url(p, "https://HOOKS.example.com./x?y=1", &t, why, sizeof why), 0);
  assert_string_equal(t.host, "hooks.example.com");
  assert_int_equal(t.port, 443);
  assert_int_equal(url(p, "https://a.b.example.org:8443/x", why), 0);
  assert_int_equal(url(p, "https://example.org/x", why), SL_EINVAL); /* not a subdomain */
  assert_non_null(strstr(why, "not among the allowed hosts"));
  assert_int_equal(url(p, "https://evilexample.org/x", why), SL_EINVAL);
  assert_int_equal(url(p, "https://hooks.example.com.evil.net/x", why), SL_EINVAL);
  assert_int_equal(url(p, "http://hooks.example.com/x", why), SL_EINVAL); /* https only */
  assert_int_equal(url(p, "ftp://hooks.example.com/x", why), SL_EINVAL);
  assert_int_equal(url(p, "https://u:p@hooks.example.com/x", why), SL_EINVAL);
  assert_non_null(strstr(why, "user info"));
  assert_int_equal(url(p, "https://hooks.example.com/x#frag", why), SL_EINVAL);
  assert_int_equal(url(p, "hooks.example.com/x", why), SL_EINVAL);
  assert_int_equal(url(p, "https://hooks.example.com/a b", why), SL_EINVAL);
  assert_int_equal(url(p, "", why), SL_EINVAL);
  sl__callback_policy_free(p);

  p = policy("", "", 1); /* off */
  assert_int_equal(sl__callback_enabled(p), 0);
  assert_int_equal(url(p, "https://hooks.example.com/x", why), SL_EINVAL);
  assert_non_null(strstr(why, "not enabled"));
  sl__callback_policy_free(p);
}

static void literal_addresses(void **state) {
  (void)state;
  char why[320];
  sl__callback_policy *p =
      policy("127.0.0.1,169.254.169.254,10.0.0.1,[::1],::ffff:127.0.0.1,8.8.8.8", "", 1);
  assert_int_equal(url(p, "http://127.0.0.1:9/x", why), SL_EINVAL);
  assert_non_null(strstr(why, "loopback"));
  assert_int_equal(url(p, "http://169.254.169.254/latest", why), SL_EINVAL);
  assert_non_null(strstr(why, "metadata"));
  assert_int_equal(url(p, "http://10.0.0.1/x", why), SL_EINVAL);
  assert_non_null(strstr(why, "private"));
  assert_int_equal(url(p, "http://[::1]/x", why), SL_EINVAL);
  assert_non_null(strstr(why, "loopback")); /* "[::1]" in the list names the host ::1 */
  assert_int_equal(url(p, "http://8.8.8.8/x", why), 0);
  sl__callback_policy_free(p);
}

static void address_classes(void **state) {
  (void)state;
  char why[320];
  sl__callback_policy *p = policy("x.example", "", 0);
  const char *refused[] = {"0.0.0.0",
                           "10.9.8.7",
                           "100.64.0.1",
                           "127.0.0.1",
                           "127.255.0.1",
                           "169.254.1.1",
                           "169.254.169.254",
                           "172.16.0.1",
                           "172.31.255.255",
                           "192.168.1.1",
                           "224.0.0.1",
                           "255.255.255.255",
                           "::",
                           "::1",
                           "fe80::1",
                           "fd00::1",
                           "fd00:ec2::254",
                           "ff02::1",
                           "::ffff:127.0.0.1",
                           "::ffff:10.0.0.1",
                           "64:ff9b::a9fe:a9fe"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    if (addr(p, refused[i], why) != SL_EINVAL) fail_msg("%s was allowed", refused[i]);
  }
  const char *allowed[] = {"8.8.8.8", "172.32.0.1", "192.169.0.1", "2606:4700::1111",
                           "::ffff:8.8.8.8"};
  for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
    if (addr(p, allowed[i], why) != 0) fail_msg("%s was refused: %s", allowed[i], why);
  sl__callback_policy_free(p);

  /* explicitly allowed: exactly what the ranges cover */
  p = policy("x.example", "127.0.0.1, 10.1.0.0/16, ::1", 0);
  assert_int_equal(addr(p, "127.0.0.1", why), 0);
  assert_int_equal(addr(p, "127.0.0.2", why), SL_EINVAL);
  assert_int_equal(addr(p, "10.1.200.3", why), 0);
  assert_int_equal(addr(p, "10.2.0.1", why), SL_EINVAL);
  assert_int_equal(addr(p, "::1", why), 0);
  assert_int_equal(addr(p, "::ffff:127.0.0.1", why), 0); /* the IPv4 inside is allowed */
  assert_int_equal(addr(p, "169.254.169.254", why), SL_EINVAL);
  sl__callback_policy_free(p);
}

static void bad_settings(void **state) {
  (void)state;
  char err[256];
  sl__callback_policy *p = NULL;
  sl__callback_conf c = {"a.example", "10.0.0.0/33", 0};
  assert_int_equal(sl__callback_policy_new(&p, &c, err, sizeof err), SL_ECONFIG);
  assert_non_null(strstr(err, "10.0.0.0/33"));
  c = (sl__callback_conf){"a.example", "not-an-address", 0};
  assert_int_equal(sl__callback_policy_new(&p, &c, err, sizeof err), SL_ECONFIG);
  c = (sl__callback_conf){"*example.com", "", 0};
  assert_int_equal(sl__callback_policy_new(&p, &c, err, sizeof err), SL_ECONFIG);
  c = (sl__callback_conf){"a.*.example.com", "", 0};
  assert_int_equal(sl__callback_policy_new(&p, &c, err, sizeof err), SL_ECONFIG);
  assert_null(p);
}

/* One host for check, pin and request: the URL a delivery sends names the
 * host the allow-list checked and the pin ("host:port:address") carries,
 * whatever case or trailing dot the submitted URL had. */
static void normalised_host(void **state) {
  (void)state;
  char why[320];
  sl__callback_policy *p = policy("hooks.example.com,[::1],127.0.0.1", "::1,127.0.0.1", 1);
  sl__callback_target t;
  assert_int_equal(sl__callback_check_url(p, "https://HOOKS.Example.COM./a/b?c=d", &t, why, 320),
                   0);
  assert_string_equal(t.host, "hooks.example.com");
  assert_string_equal(t.url, "https://hooks.example.com/a/b?c=d");
  assert_int_equal(sl__callback_check_url(p, "https://hooks.example.com.:8443/x", &t, why, 320), 0);
  assert_string_equal(t.url, "https://hooks.example.com:8443/x");
  assert_int_equal(t.port, 8443);
  assert_int_equal(sl__callback_check_url(p, "https://hooks.example.com/x", &t, why, 320), 0);
  assert_string_equal(t.url, "https://hooks.example.com/x");
  assert_int_equal(sl__callback_check_url(p, "http://[::1]:9/x", &t, why, 320), 0);
  assert_string_equal(t.host, "::1");
  assert_string_equal(t.url, "http://[::1]:9/x");
  assert_int_equal(sl__callback_check_url(p, "http://127.0.0.1.:9/x", &t, why, 320), 0);
  assert_string_equal(t.url, "http://127.0.0.1:9/x");
  /* two trailing dots, or an empty label, name no host the pin can match */
  assert_int_equal(url(p, "https://hooks.example.com../x", why), SL_EINVAL);
  assert_int_equal(url(p, "https://hooks..example.com/x", why), SL_EINVAL);
  assert_int_equal(url(p, "https://./x", why), SL_EINVAL);
  sl__callback_policy_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hosts_and_form),  cmocka_unit_test(literal_addresses),
      cmocka_unit_test(address_classes), cmocka_unit_test(bad_settings),
      cmocka_unit_test(normalised_host),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
