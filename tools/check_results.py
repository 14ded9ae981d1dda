#!/usr/bin/env python3
"""Check that benchmarks/results and the chapters agree: every result file is cited by a notebook in nbs/ or by
README.md (by name, or by a name with `*` in it), and every result file a notebook or README.md names exists.
Usage: python tools/check_results.py   (exits 1 and lists the files uncited and the names that point nowhere)"""
import fnmatch, re, sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
files = sorted(p.name for p in (root/'benchmarks'/'results').iterdir())
NAME = re.compile(r'[\w.*-]+_(?:h200|h100|cpu)_[\w.*-]*?\.(?:json|txt)|[\w-]+_\*\.json')

def cited() -> set:
    "The result names (possibly with `*`) that the notebooks and the README mention."
    texts = [p.read_text() for p in sorted((root/'nbs').glob('*.ipynb'))] + [(root/'README.md').read_text()]
    return {m.group() for t in texts for m in NAME.finditer(t.replace('\\n', ' '))}

names = cited()
uncited = [f for f in files if not any(fnmatch.fnmatch(f, n) for n in names)]
missing = sorted(n for n in names if not any(fnmatch.fnmatch(f, n) for f in files))
for f in uncited: print('cited nowhere:', f)
for n in missing: print('no such result:', n)
print(f'{len(files)} results, {len(names)} names cited; {len(uncited)} uncited, {len(missing)} missing')
sys.exit(1 if uncited or missing else 0)
