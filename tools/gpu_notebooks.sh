#!/usr/bin/env bash
# Execute notebooks on a CUDA machine with every cell (cuda and slow included), keeping their outputs.
# Needs the pure-Python wheels of execnb/nbdev in .whl/ when the machine has none installed:
#   bash ../shared/tools/device-wheels.sh   (or: pip download "execnb<0.2" "fastcore<1.15" "nbdev==2.4.14" ipython ...)
# Usage: tools/gpu_notebooks.sh OUTDIR nbs/05_x.ipynb [more notebooks]; executed copies are written to OUTDIR.
set -u
out=$1; shift
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else export PYTHONPATH=$PWD; fi
export PYTHONUNBUFFERED=1
for nb in "$@"; do
  t0=$(date +%s)
  python3 - "$nb" "$out/$(basename "$nb")" <<'PY'
import os, sys
from pathlib import Path
from execnb.shell import CaptureShell
src, dest = (str(Path(a).resolve()) for a in sys.argv[1:3])
os.chdir(Path(src).parent)                     # as nbdev_test does: a notebook runs from its own folder
sh = CaptureShell(src)
# like nbdev_test, skip the cells marked `#| eval: false` (the Colab set-up)
skip = lambda cell: cell.cell_type == 'code' and '#| eval: false' in cell.source
sh.execute(src, dest, exc_stop=False, preproc=skip)
import json
errs = [o for c in json.load(open(dest))['cells'] if c['cell_type'] == 'code' for o in c.get('outputs', []) if o.get('output_type') == 'error']
for e in errs: print('ERROR in', src, e.get('ename'), e.get('evalue'))
print(Path(src).name, 'ok' if not errs else f'{len(errs)} errors')
PY
  echo "$nb took $(( $(date +%s) - t0 )) s"
done
