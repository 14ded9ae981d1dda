"""The benchmark scripts that have a CPU mode run it, so that a script cannot rot between GPU runs: each one's
`--smoke` (or `--tiny`) must finish, with no section failed, and write its JSON stamped with date, commit and GPU.
Tiny shapes in Triton's interpreter: nothing is measured. `serve_stall.py` runs on a CPU anyway: one short run.
(`rmsnorm_engine_gpu.py --smoke` works too but takes minutes, so it is left out.)"""
import json, os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
SMOKE = {'attention_gpu': ['--smoke'], 'decode_batch_gpu': ['--smoke'], 'decode_fused_gpu': ['--smoke'],
         'fused_layer_gpu': ['--tiny'], 'gpu_gaps_gpu': ['--smoke', '--max-batched=64,128'],
         'int8_batch_gpu': ['--smoke', '--m=16,40'], 'int8_gemv_limits_gpu': ['--smoke'],
         'int8_rmsnorm_gpu': ['--smoke'], 'small_batch_gpu': ['--smoke'],
         'serve_stall': ['--repeats=1', '--words=100000']}

@pytest.mark.parametrize('name', SMOKE)
def test_script_smoke(name, tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT/'benchmarks')]))
    r = subprocess.run([sys.executable, str(ROOT/'benchmarks'/f'{name}.py'), *SMOKE[name]], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, f"{name} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    saved = [json.loads(p.read_text()) for p in tmp_path.glob('*.json')]
    assert saved, f"{name} wrote no JSON"
    for s in saved: assert s['date'] and s['commit'] and 'gpu' in s, f"{name}: result not stamped: {list(s)[:8]}"
    for s in saved: assert not s.get('errors'), f"{name}: sections failed: {s['errors']}"
