"""What every GPU benchmark script here shares: the results folder, a log line with the seconds since start, saving
the results as JSON, and running a section so that its failure is recorded instead of ending the run."""
import os, json, time, datetime, subprocess, traceback

OUT = os.environ.get('OUT') or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'results')
os.makedirs(OUT, exist_ok=True)
T0 = time.time()

def log(*a): print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)

def commit() -> str:
    "The commit measured: `MINILLM_COMMIT` if set (a copy of the tree without .git), else git's HEAD."
    return os.environ.get('MINILLM_COMMIT') or subprocess.run(['git', 'rev-parse', '--short', 'HEAD'],
                                                              capture_output=True, text=True).stdout.strip()

def saver(results, name: str):
    "A function that writes `results` to `OUT/name.json`, stamped with the date, the commit and the GPU."
    results.setdefault('date', datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'))
    results.setdefault('commit', commit())
    import torch
    results.setdefault('gpu', torch.cuda.get_device_name() if torch.cuda.is_available() else None)
    def save(): json.dump(results, open(os.path.join(OUT, f'{name}.json'), 'w'), indent=1, default=str)
    return save

def run_section(fn, results, save, name=None):
    "Run `fn()`; on an exception record its traceback in `results['errors'][name]` and go on; save either way."
    name = name or fn.__name__
    log('==', name)
    try: fn()
    except Exception:
        results['errors'][name] = traceback.format_exc()
        log('FAILED', name)
        print(results['errors'][name])
    save()

def decoding(eng, b: int, tag: str = 'bench'):
    """`b` requests of 256-token prompts added to engine `eng` and stepped until all are decoding: their ids (to abort
    afterwards) and the scheduled decode step of all of them, ready to pack."""
    from minillm import SamplingParams
    sp = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    ids = [(tag, i) for i in range(b)]
    for i, rid in enumerate(ids): eng.add_request(rid, list(range(1000 + i, 1256 + i)), sp)
    running = eng.scheduler.running
    while len(running) < b or any(len(s.output_ids) < 3 for s in running): eng.step()
    eng.stepper.drain(eng)                                   # the tokens of an overlapped step
    sched = eng.scheduler.schedule().scheduled
    assert len(sched) == b and all(n == 1 for _, n in sched)
    return ids, sched

def place(eng, batch):
    "Copy a batch packed for a graph into the graph bank's static block table, as `GraphBank.replay` does."
    assert batch.padded, batch.kind
    S, w = batch.block_tables.shape
    eng.runner.graphs.tables[:S, :w] = batch.block_tables
