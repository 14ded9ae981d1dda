#!/usr/bin/env python3
"""Does one long prompt hold up the other clients of `minillm serve`? A client streams 400 tokens; two seconds in,
another posts a prompt of `--words` words (far past the context, so it is refused). Reported: the longest gap
between two events of the stream, with and without the long prompt, `--repeats` times each.

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

def post_long(url: str, words: int) -> int:
    "Post a prompt of `words` words; the status code of the answer."
    body = dict(prompt='word ' * words, max_tokens=1)
    return httpx.post(url + '/v1/completions', json=body, timeout=300).status_code

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
    if words:                        # from another process, whose work cannot delay this one's reading
        with cf.ProcessPoolExecutor(1) as ex: status = ex.submit(post_long, url, words).result()
        assert status == 400, status
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
            with server_process('--device', 'cpu', port=0, cwd=tree) as p:
                for words in (0, args.words):
                    ms = longest_gap(p.url[:-3], words)
                    res['runs'].append(dict(build=name, words=words, longest_gap_ms=ms))
                    log(f"{name:10} long prompt {'yes' if words else 'no ':3}: longest gap {ms:6.1f} ms")
                    save()
    print(f"{'build':10} {'long prompt':>11} {'longest gaps between events (ms)':>34}")
    for name in builds:
        for words in (0, args.words):
            ms = [r['longest_gap_ms'] for r in res['runs'] if r['build'] == name and r['words'] == words]
            print(f"{name:10} {'yes' if words else 'no':>11} {', '.join(f'{m:.0f}' for m in ms):>34}")

if __name__ == '__main__': main()
