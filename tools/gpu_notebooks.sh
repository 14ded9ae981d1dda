#!/usr/bin/env bash
# Execute notebooks on a CUDA machine with every cell (cuda and slow included), keeping their outputs.
# Needs the pure-Python wheels of execnb/nbdev in .whl/ when the machine has none installed:
#   bash ../shared/tools/device-wheels.sh   (or: pip download "execnb<0.2" "fastcore<1.15" "nbdev==2.4.14" ipython ...)
# Usage: tools/gpu_notebooks.sh [--cpu-cells] OUTDIR nbs/05_x.ipynb [more notebooks]; executed copies are written
# to OUTDIR. --cpu-cells runs only the cells the CPU tests run (no cuda or slow cells): on a machine with a GPU, where
# Triton's interpreter is off and the kernel chapters' test cells run on CUDA, that is what a reader who runs a
# chapter there meets. Every failing cell is listed; execution goes on after a failure.
set -u
skip='#| eval: false'
if [ "$1" = --cpu-cells ]; then skip='#| eval: false;#| cuda;#| slow'; shift; fi
out=$1; shift
mkdir -p "$out"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else export PYTHONPATH=$PWD; fi
export PYTHONUNBUFFERED=1
for nb in "$@"; do
  t0=$(date +%s)
  SKIP="$skip" python3 - "$nb" "$out/$(basename "$nb")" <<'PY'
import os, sys
from pathlib import Path
from execnb.shell import CaptureShell
src, dest = (str(Path(a).resolve()) for a in sys.argv[1:3])
os.chdir(Path(src).parent)                     # as nbdev_test does: a notebook runs from its own folder
sh = CaptureShell(src)
# like nbdev_test, skip the cells marked `#| eval: false` (the Colab set-up), and with --cpu-cells its flagged ones
flags = os.environ['SKIP'].split(';')
skip = lambda cell: cell.cell_type == 'code' and any(f in cell.source for f in flags)
sh.execute(src, dest, exc_stop=False, preproc=skip)
import json
errs = [(i, o) for i, c in enumerate(json.load(open(dest))['cells'])
        for o in c.get('outputs', []) if o.get('output_type') == 'error']
for i, e in errs: print('ERROR in', Path(src).name, 'cell', i, e.get('ename'), str(e.get('evalue'))[:300])
print(Path(src).name, 'ok' if not errs else f'{len(errs)} errors')
PY
  echo "$nb took $(( $(date +%s) - t0 )) s"
done
