#!/usr/bin/env python3
"""Does one heavy request hold up the other clients of `minillm serve`? A client streams 400 tokens; two seconds in,
another posts a prompt of `--words` words (far past the context, so it is refused), or with `--load=schema` a
structured output of `--choices` choices (a second's compiling); 0.2 s later a third client posts a one-token
request. Reported, with and without the heavy request, `--repeats` times each: the longest gap between two events
of the stream, and how long the one-token request took.

Run from the repository root (the embedded default model on the CPU, a minute or two):
  PYTHONPATH=.:benchmarks python3 benchmarks/serve_stall.py
  PYTHONPATH=.:benchmarks python3 benchmarks/serve_stall.py --before /path/to/an/older/checkout
With `--before`, the server of that checkout (its own `minillm` package) takes turns with this one
(`server_process(cwd=...)`).
Writes serve_stall.json to $OUT if set, else to benchmarks/results/.
"""
import argparse, os, threading, time
import concurrent.futures as cf
import httpx
from minillm.server import server_process
from helpers.bench_io import log, saver

def heavy(load: str, size: int) -> tuple:
    "The heavy request's body, and the status it is answered with."
    if load == 'prompt': return dict(prompt='word ' * size, max_tokens=1), 400
    return dict(prompt='hi', max_tokens=1, guided_choice=[f'option number {i}' for i in range(size)]), 200

def post(url: str, body: dict) -> tuple:
    "The status of `body` posted to /v1/completions, and the milliseconds it took."
    t = time.perf_counter()
    status = httpx.post(url + '/v1/completions', json=body, timeout=300).status_code
    return status, (time.perf_counter() - t) * 1e3

def during(url: str, request: tuple | None) -> tuple:
    """The longest gap (ms) between two events of a 400-token stream, with `request` (body, status) posted 2 s in;
    and the milliseconds a one-token request posted 0.2 s after it took."""
    gaps = []
    def stream():
        body = dict(prompt='hi', max_tokens=400, ignore_eos=True, stream=True)
        with httpx.stream('POST', url + '/v1/completions', json=body, timeout=300) as r:
            last = time.perf_counter()
            for _ in r.iter_lines():
                now = time.perf_counter()
                gaps.append(now - last)
                last = now
    t = threading.Thread(target=stream)
    t.start()
    time.sleep(2)
    # from other processes, whose work cannot delay this one's reading
    with cf.ProcessPoolExecutor(2) as ex:
        big = request and ex.submit(post, url, request[0])
        time.sleep(0.2)
        status, small_ms = ex.submit(post, url, dict(prompt='hi', max_tokens=1)).result()
        assert status == 200 and (not big or big.result()[0] == request[1]), (status, big and big.result())
    t.join()
    return max(gaps) * 1e3, small_ms

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--load', choices=('prompt', 'schema'), default='prompt', help='the heavy request (default: prompt)')
    ap.add_argument('--words', type=int, default=800_000, help='words of the long prompt (default: 800,000, 4 MB)')
    ap.add_argument('--choices', type=int, default=2000, help="--load=schema: the guided_choice's choices")
    ap.add_argument('--repeats', type=int, default=3)
    ap.add_argument('--before', default=None, help='a checkout of an earlier build to take turns with')
    args = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    builds = {'this build': here} | ({'before': os.path.abspath(args.before)} if args.before else {})
    size = args.words if args.load == 'prompt' else args.choices
    res = dict(load=args.load, size=size, repeats=args.repeats, runs=[])
    save = saver(res, 'serve_stall')
    for i in range(args.repeats):
        for name, tree in builds.items():
            with server_process('--device', 'cpu', port=0, cwd=tree) as p:
                for on in (False, True):
                    ms, small = during(p.url[:-3], on and heavy(args.load, size))
                    res['runs'].append(dict(build=name, heavy=on, longest_gap_ms=ms, one_token_ms=small))
                    log(f"{name:10} heavy {args.load} {'yes' if on else 'no ':3}: longest gap {ms:6.1f} ms, "
                        f"one-token request {small:6.1f} ms")
                    save()
    head = 'longest gaps between events (ms)', 'one-token request (ms)'
    print(f"{'build':10} {'heavy ' + args.load:>12} {head[0]:>34} {head[1]:>24}")
    for name in builds:
        for on in (False, True):
            rs = [r for r in res['runs'] if r['build'] == name and r['heavy'] == on]
            gaps, small = (', '.join(f"{r[k]:.0f}" for r in rs) for k in ('longest_gap_ms', 'one_token_ms'))
            print(f"{name:10} {'yes' if on else 'no':>12} {gaps:>34} {small:>24}")

if __name__ == '__main__': main()
