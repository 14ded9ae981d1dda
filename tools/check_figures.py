#!/usr/bin/env python3
"""Check that every figure in the Results table of nbs/index.ipynb (and so README.md) is found where its row says:
in the cited notebook (its saved outputs and text) or in the cited result file, up to the figure's own rounding
and a factor of a thousand (README 27.6 matches 27.555 in a saved output, 1,266 matches 1265.6, 253 µs 0.2532 ms).
Usage: python tools/check_figures.py   (exits 1 and lists the figures it could not find)"""
import json, re, sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
NUM = re.compile(r'(?<![\w.])\d[\d,]*(?:\.\d+)?(?:e-?\d+)?')

def numbers(text: str) -> list:
    "The numbers in `text`, as (value, decimals) with thousands separators dropped."
    out = []
    for m in NUM.finditer(text):
        s = m.group().rstrip(',').replace(',', '')
        if not s: continue
        d = len(s.split('.')[1].split('e')[0]) if '.' in s else 0
        out.append((float(s), d, s))
    return out

def haystack(where: str) -> str:
    "The text a row's figures are checked against: a notebook's cells and saved outputs, or result files."
    texts = []
    for ref in re.findall(r'`([^`]+)`', where):
        p = root/ref if '/' in ref else root/'nbs'/f'{ref}.ipynb'
        files = sorted(p.glob('*.json')) if p.is_dir() else [p] if p.exists() else []
        for f in files:
            if f.suffix != '.ipynb':
                texts.append(f.read_text())
                continue
            for c in json.loads(f.read_text())['cells']:
                texts.append(''.join(c['source']))
                for o in c.get('outputs', []):
                    texts.append(''.join(o.get('text', '')) + ''.join(o.get('data', {}).get('text/plain', '')))
    return '\n'.join(texts)

def found(value, decimals, pool) -> bool:
    "Is a number in `pool` (or a thousand times it, or a thousandth: ms and µs) `value` at `value`'s decimals?"
    near = lambda v: abs(round(v, decimals) - value) < 10 ** -(decimals + 3)
    return any(near(v) or near(v * 1e3) or near(v / 1e3) for v, _, _ in pool)

def rows(md: str):
    "(what, result, where) of each row of the Results table."
    block = next(b for b in md.split('## Results', 1)[1].split('\n\n') if b.startswith('| what'))
    for line in block.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) == 3: yield cells

def main() -> int:
    cells = json.loads((root/'nbs'/'index.ipynb').read_text())['cells']
    md = '\n\n'.join(''.join(c['source']) for c in cells if c['cell_type'] == 'markdown')
    missing = []
    for what, result, where in rows(md):
        text = haystack(where)
        if not text:
            missing.append(f"{what}: nothing to check against in {where}")
            continue
        pool = numbers(text)
        missing += [f"{what}: {s} not in {where}" for v, d, s in numbers(result) if not found(v, d, pool)]
    for m in missing: print(m)
    print(f"{len(missing)} figures of the Results table not found where they are cited")
    return 1 if missing else 0

if __name__ == '__main__': sys.exit(main())
