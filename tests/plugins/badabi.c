/* SPDX-License-Identifier: Apache-2.0 */
/*
 * badabi.c — a test plugin built for a future ABI (99): the host must refuse
 * it with a message naming both ABI versions, never call into it.
 */
#include "sluice/sl_plugin.h"

static const sl_plugin desc = {
    .abi_version = 99,
    .struct_size = sizeof(sl_plugin),
    .kind = SL_PLUGIN_KIND_STT,
    .name = "badabi",
    .version = "0.0.0",
    .description = "test: wrong ABI version",
};

__attribute__((visibility("default"))) const sl_plugin *sluice_plugin_entry(void);
const sl_plugin *sluice_plugin_entry(void) { return &desc; }
