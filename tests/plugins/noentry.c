/* SPDX-License-Identifier: Apache-2.0 */
/*
 * noentry.c — a shared object without the entry symbol: the host must say
 * it is not a Sluice plugin.
 */
__attribute__((visibility("default"))) int sluice_not_a_plugin(void);
int sluice_not_a_plugin(void) { return 42; }
