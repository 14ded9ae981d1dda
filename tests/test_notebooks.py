"""Runs every notebook in nbs/ through nbdev's test machinery (cells flagged with settings.ini's tst_flags are
skipped), one pytest test per notebook, each in a fresh Python process so that no notebook's global state (grad
mode, default device, imported kernels) reaches another, and with no environment that plain `nbdev_test` lacks
(the kernel modules choose Triton's interpreter themselves); plus the checks that keep the exported library, the
README and its figures in step with the notebooks."""
import filecmp, shutil, subprocess, sys
from pathlib import Path
import pytest
from nbdev.config import get_config

ROOT = Path(__file__).resolve().parent.parent
NBS = sorted((ROOT/'nbs').glob('*.ipynb'))
RUN = """
import sys
from pathlib import Path
from nbdev.test import test_nb
ok, secs = test_nb(Path(sys.argv[1]), skip_flags=sys.argv[2].split())
sys.exit(0 if ok else 1)
"""

@pytest.mark.parametrize('nb', NBS, ids=[p.stem for p in NBS])
def test_notebook(nb):
    r = subprocess.run([sys.executable, '-c', RUN, str(nb), get_config(path=ROOT).tst_flags], capture_output=True, text=True)
    assert r.returncode == 0, f"{nb.name} failed:\n{r.stderr[-6000:]}"

def test_library_matches_notebooks(tmp_path):
    "minillm/ is exactly what the notebooks export (no hand edits, no forgotten export)."
    for p in ['nbs', 'settings.ini', 'minillm', 'setup.py', 'pyproject.toml', 'README.md']:
        src = ROOT/p
        if src.is_dir(): shutil.copytree(src, tmp_path/p, ignore=shutil.ignore_patterns('__pycache__'))
        elif src.exists(): shutil.copy(src, tmp_path/p)
    subprocess.run([sys.executable, '-c', 'from nbdev.doclinks import nbdev_export; nbdev_export()'], cwd=tmp_path, check=True)
    cmp = filecmp.dircmp(ROOT/'minillm', tmp_path/'minillm', ignore=['__pycache__'])
    def diffs(c, pre=''):
        out = [pre + f for f in c.diff_files + c.left_only + c.right_only]
        for name, sub in c.subdirs.items(): out += diffs(sub, f'{pre}{name}/')
        return out
    assert not diffs(cmp), f"minillm/ differs from the notebooks' export: {diffs(cmp)}; run nbdev_export"

def test_readme_matches_index():
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'sync_readme.py'), '--check'], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout

def test_readme_figures():
    "Each figure of the README's Results table is found in the notebook output or result file its row cites."
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'check_figures.py')], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout

def test_results_cited():
    "Every file of benchmarks/results is cited by a chapter or the README, and every result they cite exists."
    r = subprocess.run([sys.executable, str(ROOT/'tools'/'check_results.py')], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout

def test_colab_cells():
    "Every chapter installs minillm in Colab; one that reads files of the repository does it in a checkout's nbs/."
    import json
    for nb in NBS:
        if nb.stem in ('index', 'quickstart'): continue
        cells = [(c['cell_type'], ''.join(c['source'])) for c in json.loads(nb.read_text())['cells']]
        colab = [s for _, s in cells if '# in Colab' in s]
        assert colab and 'pip install' in colab[0], f"{nb.name}: no Colab cell that installs minillm"
        reads = any(t == 'code' and not s.startswith('#| hide') and any(p in s for p in ('benchmarks/results', "'benchmarks'", 'csrc/', "'..'"))
                    for t, s in cells)
        assert not reads or '%cd /content/minillm/nbs' in colab[0], \
            f"{nb.name} reads files of the repository: its Colab cell must clone it and work in its nbs/"
