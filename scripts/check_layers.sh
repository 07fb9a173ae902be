#!/usr/bin/env bash
# Fails when a header includes a folder its layer may not use (CTest
# "layers"). The layers, bottom up, and what each may include (README,
# "Architecture"); a folder's arch/ subfolder counts as the folder.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../include/xshard"

declare -A allowed=(
  [core]=""
  [mesh]="core"
  [sharding]="core mesh"
  [einsum]="core"
  [trace]="core"
  [spmd]="core mesh sharding einsum trace"
  [ops]="core trace"
  [graph]="core mesh sharding einsum spmd ops trace"
  [nn]="core mesh sharding einsum spmd ops trace graph"
  [scan]="core mesh sharding einsum spmd ops trace graph nn"
  [optim]="core mesh sharding einsum spmd trace"
  [checkpoint]="core mesh sharding einsum spmd trace optim"
)

bad=0
for dir in */; do
  folder=${dir%/}
  if [ -z "${allowed[$folder]+set}" ]; then
    echo "check_layers: include/xshard/$folder/ is not in the layer table (scripts/check_layers.sh)" >&2
    bad=1
    continue
  fi
  while IFS=: read -r file line used; do
    case " ${allowed[$folder]} $folder " in
      *" $used "*) ;;
      *)
        echo "check_layers: $file:$line: $folder/ includes $used/ (a $folder header may include: ${allowed[$folder]:-nothing of xshard})" >&2
        bad=1
        ;;
    esac
  done < <(grep -rnoE '#include "(\.\./)+[a-z_]+/' "$folder" | sed -E 's|^([^:]+):([0-9]+):#include "(\.\./)+([a-z_]+)/|xshard/\1:\2:\4|')
done
if [ "$bad" -ne 0 ]; then exit 1; fi
echo "check_layers: every include of include/xshard/*/ follows the layers"
