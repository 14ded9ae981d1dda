#!/usr/bin/env python3
"""The docs build's notebook processing, without Quarto: what `nbdev_docs`, `nbdev_preview` and the deploy workflow
run before Quarto renders (nbdev 2.4.14: refresh _quarto.yml/nbdev.yml, _modidx, the sidebar, `proc_nbs` into _proc/).

That step executes exported cells, `show_doc` cells and every cell that contains an import statement, and ignores
settings.ini's tst_flags. Two rules keep it clean on a machine without a GPU, checked first: no non-exported cell
mixes imports with other code, and no cell flagged with a tst_flag (cuda, slow) is one the step executes. Such
cells keep their saved outputs in the rendered page.

Usage: python tools/docs_proc.py          # check, then nbdev's own proc_nbs over nbs/ (stops at the first error)
       python tools/docs_proc.py --each   # check, then each notebook in its own process, reporting every failure
"""
import ast, shutil, subprocess, sys, warnings
from nbdev.config import get_config
from nbdev.process import NBProcessor
from nbdev.frontmatter import FrontmatterProc
from nbdev.processors import _do_eval, add_show_docs
import nbdev.doclinks, nbdev.quarto

EXPORTS = {'export', 'exports', 'exporti', 'exec_doc'}

def only_imports(src: str) -> bool:
    body = ast.parse(src).body
    return all(isinstance(o, (ast.Import, ast.ImportFrom)) or 'show_doc' in ast.unparse(o) for o in body)

def check(files, flags) -> list:
    "The cells that break the two rules, as messages."
    bad = []
    for f in files:
        nb = NBProcessor(f, procs=[FrontmatterProc, add_show_docs], process=True).nb
        for c in nb.cells:
            if c.cell_type != 'code' or not c.source: continue
            d = set(c.directives_)
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                runs = _do_eval(c)
            if not runs or d & EXPORTS: continue
            if d & flags: bad.append(f"{f.name}: a cell flagged {sorted(d & flags)} is executed by the docs step")
            elif not only_imports(c.source): bad.append(f"{f.name}: a cell mixes imports with other code")
            else: continue
            bad[-1] += f" (put its imports in a cell of their own):\n{c.source[:200]}"
    return bad

ONE = """
import sys
from pathlib import Path
import nbdev.serve_drv
from nbdev.processors import FilterDefaults
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
dst.parent.mkdir(parents=True, exist_ok=True)
nbdev.serve_drv.main((src, dst, FilterDefaults))       # what each proc_nbs worker does with a notebook
"""

def each(cfg, files) -> list:
    "Process every notebook in its own process; the names of those that failed."
    nbdev.quarto.refresh_quarto_yml()
    nbdev.doclinks._build_modidx()
    failed = []
    for f in files:
        cmd = [sys.executable, '-c', ONE, str(f), str(cfg.config_path/'_proc'/f.name)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        print('ok  ' if r.returncode == 0 else 'FAIL', f.name, flush=True)
        if r.returncode:
            failed.append(f.name)
            print(r.stderr[-3000:])
    return failed

if __name__ == '__main__':
    cfg = get_config()
    files = sorted(cfg.nbs_path.glob('*.ipynb'))
    bad = check(files, set(cfg.tst_flags.split()))
    for b in bad: print('RULE', b, '\n')
    shutil.rmtree(cfg.config_path/'_proc', ignore_errors=True)
    if '--each' in sys.argv:
        failed = each(cfg, files)
        print(f"{len(files) - len(failed)} passed, {len(failed)} failed")
    else:
        failed = []
        nbdev.quarto._ensure_quarto = lambda: None        # Quarto renders _proc/ afterwards; not needed here
        nbdev.quarto.nbdev_proc_nbs.__wrapped__()         # not force=True: that rewrites sidebar.yml as well
        print(f"{len(files)} notebooks processed into {cfg.config_path/'_proc'}")
    sys.exit(1 if failed or bad else 0)
