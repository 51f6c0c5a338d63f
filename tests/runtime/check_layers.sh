#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# check_layers.sh SOURCE_DIR — the stage runtime is a star with calls one way
# (runtime/src/sl_stage_job.h): each of its files includes only the runtime
# headers below it, none beside or above, and none of them is included from
# outside runtime/src. A file and its own header share a layer. Prints each
# include that breaks the order and exits 1; 0 when there is none.
set -euo pipefail
ROOT=${1:?usage: check_layers.sh SOURCE_DIR}
SRC=$ROOT/runtime/src
# the layers, lowest first; one line a layer
LAYERS=(
  "sl_queue"
  "sl_stage_job sl_stage_conf"
  "sl_stage_part sl_stage_fair sl_stage_budget"
  "sl_stage_gate sl_stage_work sl_stage_out"
  "sl_stage_lag"
  "sl_stage_group"
  "sl_stage"
)
declare -A rank
for i in "${!LAYERS[@]}"; do
  for m in ${LAYERS[$i]}; do rank[$m]=$i; done
done
bad=0
checked=0
for f in "$SRC"/sl_stage*.[ch] "$SRC"/sl_queue.h; do
  base=$(basename "$f")
  mod=${base%.*}
  [[ -n ${rank[$mod]+x} ]] || {
    echo "$base: a runtime file no layer names (add it to LAYERS in $0)"
    bad=1
    continue
  }
  checked=$((checked + 1))
  while IFS= read -r inc; do
    hmod=${inc%.h}
    [[ -n ${rank[$hmod]+x} ]] || continue # a public header (sluice/...) or a system one
    [[ $hmod == "$mod" ]] && continue     # its own header
    if ((rank[$hmod] >= rank[$mod])); then
      echo "$base includes $inc: layer ${rank[$hmod]} is not below its own (${rank[$mod]})"
      bad=1
    fi
  done < <(sed -n 's/^#include "\([^"/]*\)".*/\1/p' "$f")
done
# nothing outside runtime/src reaches into the runtime's internals
while IFS= read -r hit; do
  echo "outside the runtime: $hit"
  bad=1
done < <(grep -rn --include='*.[ch]' -E '#include "(\.\./)*(runtime/src/)?(sl_stage_[a-z]+|sl_queue)\.h"' \
  "$ROOT/stages" "$ROOT/plugins" "$ROOT/tools" "$ROOT/bench" "$ROOT/tests" 2>/dev/null || true)
if ((checked < 15)); then
  echo "only $checked runtime files found under $SRC: is SOURCE_DIR right?"
  bad=1
fi
((bad == 0)) && echo "check_layers: $checked runtime files, every include points down"
exit $bad
