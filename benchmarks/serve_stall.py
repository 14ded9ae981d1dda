#!/usr/bin/env python3
"""Does one long prompt hold up the other clients of `minillm serve`? A client streams 400 tokens; two seconds in,
another posts a prompt of `--words` words (far past the context, so it is refused). Reported: the longest gap
between two events of the stream, with and without the long prompt, `--repeats` times each.

Run from the repository root (the embedded default model on the CPU, a minute or two):
  PYTHONPATH=.:benchmarks python3 benchmarks/serve_stall.py
  PYTHONPATH=.:benchmarks python3 benchmarks/serve_stall.py --before /path/to/an/older/checkout
With `--before`, the server of that checkout (its own `minillm` package) takes turns with this one.
Writes serve_stall.json to $OUT if set, else to benchmarks/results/.
"""
import argparse, os, socket, subprocess, sys, threading, time
import httpx
from helpers.bench_io import log, saver

def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]

def start(tree: str):
    "`minillm serve` on the CPU from the checkout at `tree`; (process, its base URL) once /health answers."
    port = free_port()
    env = dict(os.environ, PYTHONPATH=tree)
    p = subprocess.Popen([sys.executable, '-c', 'from minillm.cli import main; main()', 'serve', '--device', 'cpu',
                          '--port', str(port)], cwd=tree, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    url = f'http://127.0.0.1:{port}'
    for _ in range(600):
        try:
            if httpx.get(url + '/health').status_code == 200: return p, url
        except httpx.HTTPError: pass
        time.sleep(0.2)
    p.kill()
    raise RuntimeError(f"the server of {tree} did not start")

def longest_gap(url: str, words: int) -> float:
    "The longest gap (ms) between two events of a 400-token stream, with a `words`-word prompt posted 2 s in."
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
    if words:
        r = httpx.post(url + '/v1/completions', json=dict(prompt='word ' * words, max_tokens=1), timeout=300)
        assert r.status_code == 400, r.text[:200]
    t.join()
    return max(gaps) * 1e3

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--words', type=int, default=800_000, help='words of the long prompt (default: 800,000, 4 MB)')
    ap.add_argument('--repeats', type=int, default=3)
    ap.add_argument('--before', default=None, help='a checkout of an earlier build to take turns with')
    args = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    builds = {'this build': here} | ({'before': os.path.abspath(args.before)} if args.before else {})
    res = dict(words=args.words, repeats=args.repeats, runs=[])
    save = saver(res, 'serve_stall')
    for i in range(args.repeats):
        for name, tree in builds.items():
            p, url = start(tree)
            try:
                for words in (0, args.words):
                    ms = longest_gap(url, words)
                    res['runs'].append(dict(build=name, words=words, longest_gap_ms=ms))
                    log(f"{name:10} long prompt {'yes' if words else 'no ':3}: longest gap {ms:6.1f} ms")
                    save()
            finally:
                p.terminate()
                p.wait(30)
    print(f"{'build':10} {'long prompt':>11} {'longest gaps between events (ms)':>34}")
    for name in builds:
        for words in (0, args.words):
            ms = [r['longest_gap_ms'] for r in res['runs'] if r['build'] == name and r['words'] == words]
            print(f"{name:10} {'yes' if words else 'no':>11} {', '.join(f'{m:.0f}' for m in ms):>34}")

if __name__ == '__main__': main()
