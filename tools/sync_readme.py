#!/usr/bin/env python3
"""Write README.md from nbs/index.ipynb (markdown cells verbatim; code cells as python blocks).
nbdev's own `nbdev_readme` needs Quarto; this keeps the README in step without it.
Usage: python tools/sync_readme.py [--check]   (--check exits 1 if README.md is out of date)"""
import json, sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent

def render() -> str:
    cells = json.loads((root/'nbs'/'index.ipynb').read_text())['cells']
    parts = []
    for c in cells:
        src = ''.join(c['source']).strip()
        if not src or src.startswith('#| hide'): continue
        parts.append(src if c['cell_type'] == 'markdown' else f"```python\n{src}\n```")
    return '\n\n'.join(parts) + '\n'

if __name__ == '__main__':
    text = render()
    if '--check' in sys.argv:
        ok = (root/'README.md').read_text() == text
        print('README.md is in step with nbs/index.ipynb' if ok else 'README.md differs from nbs/index.ipynb: run python tools/sync_readme.py')
        sys.exit(0 if ok else 1)
    (root/'README.md').write_text(text)
