"""What every GPU benchmark script here shares: the results folder, a log line with the seconds since start, saving
the results as JSON, and running a section so that its failure is recorded instead of ending the run."""
import os, json, time, traceback

OUT = os.environ.get('OUT') or os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results')
os.makedirs(OUT, exist_ok=True)
T0 = time.time()

def log(*a): print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)

def saver(results, name: str):
    "A function that writes `results` to `OUT/name.json`."
    def save(): json.dump(results, open(os.path.join(OUT, f'{name}.json'), 'w'), indent=1, default=str)
    return save

def run_section(fn, results, save, name=None):
    "Run `fn()`; on an exception record its traceback in `results['errors'][name]` and go on; save either way."
    name = name or fn.__name__
    log('==', name)
    try: fn()
    except Exception:
        results['errors'][name] = traceback.format_exc(); log('FAILED', name); print(results['errors'][name])
    save()
