#!/usr/bin/env python3
"""Load benchmark of `minillm serve` against the offline engine, on the same requests in the same run.

Run from the repository root:
  PYTHONPATH=.:benchmarks python3 benchmarks/serve_load.py                       # the embedded default model, CPU
  PYTHONPATH=.:benchmarks python3 benchmarks/serve_load.py --preset qwen3-0.6b   # random-weight Qwen3-0.6B, GPU
At each concurrency c: `per-client * c` requests of random prompts (`--input-len` tokens in, `--output-len` out,
ignore_eos) go to the engine directly with c in flight at a time (offline), and the same requests to `minillm serve`
from c streaming clients (raw SSE over httpx, in `--client-procs` processes, so that parsing the events does not limit
the server). The two run side by side, each with half the GPU's memory, and take turns: `--repeats` pairs of runs,
the first mode alternating, so that a machine that speeds up or slows down during the call (seen: 14% between the
offline engine's runs in one call) does not favour either. Reported: output tokens/s, time to first token and time
per output token after the first (p50, p99), server / offline throughput (the median of the pairs' ratios), and for
the server what its `/metrics` saw meanwhile (the engine's own mean latencies, the requests running and waiting).
Writes serve_load.json to $OUT if set, else to benchmarks/results/.
"""
import argparse, asyncio, importlib.util, json, multiprocessing, statistics, sys, threading, time
import concurrent.futures as cf
import numpy as np, torch, httpx
from minillm import LLM, SamplingParams
from minillm.server import server_process
from helpers.bench_io import log, saver

def percentiles(xs) -> dict:
    return dict(p50=float(np.percentile(xs, 50)) * 1e3, p99=float(np.percentile(xs, 99)) * 1e3)   # ms

def summary(t0, starts, firsts, ends, ntoks) -> dict:
    "Throughput and latencies of one run from per-request start, first-token and end times and token counts."
    ids = list(starts)
    return dict(requests=len(ids), tokens=sum(ntoks.values()),
                tokens_per_s=sum(ntoks.values()) / (max(ends.values()) - t0),
                ttft_ms=percentiles([firsts[i] - starts[i] for i in ids]),
                tpot_ms=percentiles([(ends[i] - firsts[i]) / (ntoks[i] - 1) for i in ids]))

def offline(engine, prompts, sp, c: int) -> dict:
    "The engine stepped directly, c requests in flight: a new one is added as soon as one finishes."
    todo, starts, firsts, ends, ntoks = list(range(len(prompts))), {}, {}, {}, {}
    t0, cpu0 = time.perf_counter(), time.process_time()
    while todo or engine.has_unfinished_requests():
        while todo and len(starts) - len(ends) < c:
            i = todo.pop(0)
            starts[i], ntoks[i] = time.perf_counter(), 0
            engine.add_request(i, prompts[i], sp, stream=True)
        for o in engine.step():
            t, n = time.perf_counter(), sum(len(x.token_ids) for x in o.outputs)
            if n and o.request_id not in firsts: firsts[o.request_id] = t
            ntoks[o.request_id] += n
            if o.finished: ends[o.request_id] = t
    run = summary(t0, starts, firsts, ends, ntoks)
    # this process's CPU time (all its threads): the one to set beside the server's engine process
    run['cpu_us_per_token'] = {'offline': (time.process_time() - cpu0) / run['tokens'] * 1e6}
    return run

async def clients(url: str, jobs, max_tokens: int) -> tuple:
    "Streaming clients, each sending its list of `(request index, prompt)` one after another: their timings."
    starts, firsts, ends, ntoks = {}, {}, {}, {}
    async def client(http, todo):
        for i, prompt in todo:
            body = dict(prompt=prompt, max_tokens=max_tokens, temperature=0, ignore_eos=True, stream=True,
                        stream_options=dict(include_usage=True))
            starts[i] = time.perf_counter()
            async with http.stream('POST', f'{url}/completions', json=body) as r:
                async for line in r.aiter_lines():
                    if line.startswith('data: {') and i not in firsts: firsts[i] = time.perf_counter()
                    if '"usage": {' in line: ntoks[i] = json.loads(line[6:])['usage']['completion_tokens']
            ends[i] = time.perf_counter()
    n = max(1, len(jobs))
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        await asyncio.gather(*[client(http, todo) for todo in jobs])
    return starts, firsts, ends, ntoks

def client_process(url, jobs, max_tokens): return asyncio.run(clients(url, jobs, max_tokens))

def served(pool, url: str, prompts, max_tokens: int, c: int) -> dict:
    """c clients, each streaming its next request as soon as the last one ends, spread over the processes of `pool`
    (one Python process parsing every client's events would be the bottleneck, not the server)."""
    jobs = [[(i, prompts[i]) for i in range(k, len(prompts), c)] for k in range(c)]
    P = pool._max_workers
    parts = list(pool.map(client_process, [url] * P, [jobs[p::P] for p in range(P)], [max_tokens] * P))
    starts, firsts, ends, ntoks = ({k: v for part in parts for k, v in part[j].items()} for j in range(4))
    return summary(min(starts.values()), starts, firsts, ends, ntoks)    # perf_counter: one clock for all processes

def scrape(url: str) -> dict:
    "The server's unlabelled metrics, name to value, from its Prometheus text (`url`: its /v1)."
    lines = httpx.get(url[:-3] + '/metrics', timeout=10).text.splitlines()
    return {k: float(v) for k, v in (l.rsplit(' ', 1) for l in lines if l and l[0] != '#' and '{' not in l)}

def cpu_seconds(pid: int) -> dict:
    "CPU seconds (user + system) so far of process `pid` (the server) and of its children (the engine), by name."
    import psutil
    p = psutil.Process(pid)
    procs = {'server': p, **{f'child {k.pid}': k for k in p.children(recursive=True)}}
    return {k: sum(v.cpu_times()[:2]) for k, v in procs.items()}

def watched(pool, srv, prompts, max_tokens: int, c: int) -> dict:
    """`served`, with what the server's metrics saw meanwhile: the engine's own mean time to first token and per
    output token (from its request's arrival in the engine), and requests running and waiting, every 50 ms
    (their series too: a run's ramp and tail show there); and the CPU time of the server and engine processes."""
    url, cpu0 = srv.url, cpu_seconds(srv.pid)
    samples, done = [], threading.Event()
    def poll():
        while not done.wait(0.05): samples.append((time.perf_counter(), scrape(url)))
    before, poller = scrape(url), threading.Thread(target=poll)
    poller.start()
    try: run = served(pool, url, prompts, max_tokens, c)
    finally:
        done.set()
        poller.join()
    after = scrape(url)
    delta = lambda k: after[k] - before[k]
    mean = lambda k: delta(f'{k}_sum') / delta(f'{k}_count') * 1e3                    # ms
    run['engine_ttft_ms'] = mean('minillm:time_to_first_token_seconds')
    run['engine_tpot_ms'] = mean('minillm:time_per_output_token_seconds')
    for k in ('running', 'waiting'):
        series = [x[f'minillm:num_requests_{k}'] for _, x in samples] or [float('nan')]
        run[f'{k}_mean'], run[f'{k}_series'] = statistics.fmean(series), series
    run['series_s'] = [t - samples[0][0] for t, _ in samples]     # when each sample was read, from the first
    cpu1 = cpu_seconds(srv.pid)
    run['cpu_us_per_token'] = {k: (cpu1[k] - cpu0[k]) / run['tokens'] * 1e6 for k in cpu1 if k in cpu0}
    tenth = len(run['running_series']) // 10                          # the middle 80%: no ramp, no tail
    run['running_mid_mean'] = statistics.fmean(run['running_series'][tenth:len(run['running_series']) - tenth])
    return run

def median_run(mode: str, c: int, runs: list) -> dict:
    "The run of median throughput, with every run's throughput beside it."
    m = sorted(runs, key=lambda r: r['tokens_per_s'])[len(runs) // 2]
    keys = ('tokens_per_s', 'tpot_ms', 'engine_tpot_ms', 'running_mean', 'running_mid_mean')
    return dict(mode=mode, concurrency=c, **m, runs_tokens_per_s=[r['tokens_per_s'] for r in runs],
                runs=[{k: r[k] for k in keys if k in r} for r in runs])    # every run in short, in order

def pairs(run_offline, run_server, repeats: int) -> tuple:
    "`repeats` offline and server runs taking turns (offline first in even pairs): both lists of runs."
    off, srv = (run_offline, []), (run_server, [])
    for k in range(repeats):
        for run, runs in ((off, srv) if k % 2 == 0 else (srv, off)): runs.append(run(k))
    return off[1], srv[1]

def positive(v: str) -> int:
    "An argparse type: an int >= 1."
    if not v.isdigit() or int(v) < 1: raise argparse.ArgumentTypeError(f"must be an int >= 1, got {v!r}")
    return int(v)

def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--preset', default=None, help='a random-weight checkpoint of this architecture (default: the embedded model)')
    p.add_argument('--dtype', default='auto')
    p.add_argument('--device', default='auto')
    p.add_argument('--concurrency', default='1,16,64')
    p.add_argument('--per-client', type=positive, default=4, help='requests per client at each concurrency')
    p.add_argument('--input-len', type=positive, default=256)
    p.add_argument('--output-len', type=positive, default=128)
    p.add_argument('--port', type=int, default=8321)
    p.add_argument('--repeats', type=positive, default=3, help='pairs of runs (offline, server) at each concurrency; medians are reported')
    p.add_argument('--client-procs', type=positive, default=8, help='processes the clients are spread over')
    a = p.parse_args()
    try: cs = [positive(x) for x in a.concurrency.split(',')]
    except argparse.ArgumentTypeError as e: p.error(f"argument --concurrency: each value {e}")
    model = 'tiny-qwen3'
    if a.preset:
        from minillm.loading import random_checkpoint, PRESETS
        dt = torch.bfloat16 if a.dtype in ('auto', 'bfloat16') else getattr(torch, a.dtype)
        model = str(random_checkpoint(**PRESETS[a.preset], dtype=dt, device='cuda' if torch.cuda.is_available() else 'cpu'))
    engine_args = dict(dtype=a.dtype, device=a.device, max_num_seqs=max(cs))
    g = torch.Generator().manual_seed(0)
    draw = lambda n: [torch.randint(0, 150000, (a.input_len,), generator=g).tolist() for _ in range(n)]
    warm = draw(2 * max(cs))                                   # fresh prompts everywhere: no prefix-cache hits
    prompts = {(c, k): draw(a.per_client * c) for c in cs for k in range(a.repeats)}
    sp = SamplingParams(temperature=0, max_tokens=a.output_len, ignore_eos=True)
    R = dict(device=torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu', torch=torch.__version__,
             argv=sys.argv, model=a.preset or model, rows=[],
             http_stack={m: importlib.util.find_spec(m) is not None for m in ('uvloop', 'httptools')})   # uvicorn's picks
    save = saver(R, 'serve_load')

    flags = ['--model', model, '--dtype', a.dtype, '--device', a.device, '--max-num-seqs', str(max(cs)),
             '--gpu-memory-utilization', '0.45']                 # the offline engine takes the rest
    mp = multiprocessing.get_context('spawn')
    with (server_process(*flags, port=a.port) as srv, LLM(model, **engine_args) as llm,
          cf.ProcessPoolExecutor(a.client_procs, mp_context=mp) as pool):
        offline(llm.engine, warm, sp, max(cs))                   # warm-ups: kernels, graphs, connections
        served(pool, srv.url, warm, a.output_len, max(cs))
        for c in cs:
            off, srv_runs = pairs(lambda k: offline(llm.engine, prompts[c, k], sp, c),
                                  lambda k: watched(pool, srv, prompts[c, k], a.output_len, c), a.repeats)
            ratios = [s['tokens_per_s'] / o['tokens_per_s'] for o, s in zip(off, srv_runs)]
            R['rows'] += [dict(median_run('offline', c, off), vs_offline=1.0),
                          dict(median_run('server', c, srv_runs), vs_offline=statistics.median(ratios),
                               pair_ratios=ratios)]
            log(R['rows'][-1])
            save()

    print(f"\n{R['model']} on {R['device']}, {a.input_len} -> {a.output_len} tokens, {a.per_client} requests per client, "
          f"median of {a.repeats} run(s) each, taking turns (vs offline: the median of the pairs' ratios)")
    print(f"{'mode':8} {'conc':>4} {'tokens/s':>10} {'vs offline':>10} {'TTFT p50':>9} {'p99':>8} {'TPOT p50':>9} {'p99':>8}  (ms)")
    for r in R['rows']:
        print(f"{r['mode']:8} {r['concurrency']:4} {r['tokens_per_s']:10.1f} {r['vs_offline']:10.3f} "
              f"{r['ttft_ms']['p50']:9.2f} {r['ttft_ms']['p99']:8.2f} {r['tpot_ms']['p50']:9.2f} {r['tpot_ms']['p99']:8.2f}")
    for r in (r for r in R['rows'] if r['mode'] == 'server'):
        print(f"{r['concurrency']:4} clients, server / offline in each pair: " + ', '.join(f'{x:.3f}' for x in r['pair_ratios']))
    print("\nthe server's runs as its engine saw them (means; from a request's arrival in the engine):")
    for r in (r for r in R['rows'] if r['mode'] == 'server'):
        print(f"{r['concurrency']:4} clients: TTFT {r['engine_ttft_ms']:.1f} ms, TPOT {r['engine_tpot_ms']:.2f} ms, "
              f"running {r['running_mean']:.1f} ({r['running_mid_mean']:.1f} in the middle 80%), "
              f"waiting {r['waiting_mean']:.2f}; CPU per token (us): "
              + ', '.join(f'{k} {v:.0f}' for k, v in r['cpu_us_per_token'].items()))
    for r in (r for r in R['rows'] if r['mode'] == 'offline'):
        print(f"{r['concurrency']:4} clients offline: CPU per token {r['cpu_us_per_token']['offline']:.0f} us (this process)")

if __name__ == '__main__': main()
