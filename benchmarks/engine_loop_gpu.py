#!/usr/bin/env python3
"""GPU checks of the shared engine loop (engine and LLM chapters) on random-weight Qwen3-0.6B.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/engine_loop_gpu.py [--only=fp32,...]
Sections (each runs even if an earlier one failed; failures are recorded):
  fp32     greedy tokens of every engine mode equal transformers' (fp32, 8 prompts x 32 tokens, batched, one at a
           time and two at a time): defaults (Triton attention, fused kernels, graphs, overlap), prefix caching off,
           chunked prefill, n-gram speculation, overlap off, graphs off, the PyTorch reference path
  sharing  fp32: two threads calling generate at once, and a stream left open while generate runs, give each
           caller the tokens of its prompts run alone (fp32: in bf16 a batch's composition moves near-ties)
  seeded   fp32: a seeded sampled request with speculation gives the tokens of the engine without speculation,
           alone and in a batch
  penalties fp32: penalised requests (greedy and seeded), overlapped with counts on the device, give the tokens of the
           same requests asking for logprobs, which run in order through the host's processors
  lists    fp32: requests with logit_bias or allowed_token_ids beside plain ones, on the default engine (graphs,
           overlap) against the PyTorch path: the same tokens, allowed tokens only, and the plain rows unchanged
  prompt   fp32: prompt_logprobs (a pass of their own) against the logprobs the engine's steps give the same tokens
           when they are sampled; requests with bad words beside plain ones: the words absent, the plain rows unchanged
  structured fp32: requests with structured outputs (a JSON schema, a regex, a choice) beside plain ones on the
           default engine: each text in its language and ended, the plain rows unchanged, every row's tokens those of
           an engine stepping in order (overlap=False); the seconds of the first call
           (the vocabulary laid out, the constraints compiled) and of a second, against the same batch without them
  memory   bf16: an LLM dropped without gc.collect() gives its GPU memory back: a second one at 0.9 of the card builds
Writes engine_loop_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import dataclasses, json, re, sys, threading, time
import torch
from minillm import LLM, SamplingParams
from minillm.loading import random_checkpoint, PRESETS
from helpers.bench_io import log, saver, run_section

R = dict(argv=sys.argv, errors={}, device=torch.cuda.get_device_name(), torch=torch.__version__)
save = saver(R, 'engine_loop_gpu')
toks = lambda llm, ps, sp: [o.outputs[0].token_ids for o in llm.generate(ps, sp, use_tqdm=False)]
g = torch.Generator().manual_seed(0)
PROMPTS = [torch.randint(0, 151643, (n,), generator=g).tolist() for n in (5, 64, 200, 17, 300, 1, 90, 33)]

def fp32():
    ck = random_checkpoint(**PRESETS['qwen3-0.6b'], dtype=torch.float32, device='cuda')
    sp = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    from transformers import AutoModelForCausalLM
    hf = AutoModelForCausalLM.from_pretrained(ck, dtype=torch.float32).cuda().eval()
    ref = [hf.generate(torch.tensor([p], device='cuda'), max_new_tokens=32, min_new_tokens=32, do_sample=False,
                       pad_token_id=0)[0, len(p):].tolist() for p in PROMPTS]
    del hf
    torch.cuda.empty_cache()
    kw = dict(dtype='float32', device='cuda', num_kv_blocks=2048, max_model_len=4096, max_num_seqs=64)
    modes = {'defaults': {}, 'prefix caching off': dict(enable_prefix_caching=False),
             'chunked prefill (64 tokens a step)': dict(max_num_batched_tokens=64),
             'speculation k=3': dict(speculative_tokens=3), 'overlap off': dict(overlap=False),
             'graphs off': dict(cuda_graphs='off'), 'PyTorch path': dict(attention_backend='torch', cuda_graphs='off')}
    R['fp32'] = {}
    for name, extra in modes.items():
        with LLM(str(ck), **kw, **extra) as llm:
            got = dict(batched=toks(llm, PROMPTS, sp), alone=[toks(llm, [p], sp)[0] for p in PROMPTS],
                       pairs=[t for i in range(0, 8, 2) for t in toks(llm, PROMPTS[i:i + 2], sp)])
        row = R['fp32'][name] = {k: sum(a == b for a, b in zip(v, ref)) for k, v in got.items()}
        log(f"fp32 {name:36} == transformers: batched {row['batched']}/8, one at a time {row['alone']}/8, "
            f"two at a time {row['pairs']}/8")

def llm06(dtype=torch.float32, **kw):
    ck = random_checkpoint(**PRESETS['qwen3-0.6b'], dtype=dtype, device='cuda')
    return LLM(str(ck), dtype=str(dtype)[6:], device='cuda', num_kv_blocks=4096, max_model_len=4096, max_num_seqs=64, **kw)

def sharing():
    sp = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    with llm06() as llm:
        alone = [toks(llm, [p], sp)[0] for p in PROMPTS]
        got, errors = {}, []
        def worker(k):
            try: got[k] = [toks(llm, PROMPTS, sp) for _ in range(3)]
            except Exception as e: errors.append(repr(e))
        ts = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
        for t in ts: t.start()
        for t in ts: t.join()
        threads_ok = not errors and all(r == alone for k in got for r in got[k])
        s = llm.stream(PROMPTS[:4], sp)
        first = [next(s), next(s)]
        mid = toks(llm, PROMPTS[4:], sp)
        streamed = {}
        for c in first + list(s): streamed.setdefault(c.index, []).extend(c.token_ids)
        stream_ok = [streamed[i] for i in range(4)] == alone[:4] and mid == alone[4:]
        free = llm.engine.block_manager.all_free()
    R['sharing'] = dict(threads_identical=threads_ok, errors=errors, open_stream_identical=stream_ok, blocks_free=free)
    log('sharing:', R['sharing'])

def seeded():
    # rows 0-1 ask for top-p (sorted, `sample_simple`), rows 2-3 for min-p (the one-kernel `sample_fused` when alone;
    # in a batch with top-p rows, `sample_simple`): every way must give each seeded request the same tokens
    sps = [SamplingParams(temperature=0.8, top_p=0.95 if i < 2 else 1.0, min_p=0.0 if i < 2 else 0.05, seed=i,
                          max_tokens=64, ignore_eos=True) for i in range(4)]
    crowd = [SamplingParams(temperature=1.0, max_tokens=64, ignore_eos=True)] * 4
    out = {}
    for k in (0, 3):
        with llm06(speculative_tokens=k) as llm:
            out[k, 'alone'] = [toks(llm, [p], sp)[0] for p, sp in zip(PROMPTS[:4], sps)]
            out[k, 'batch'] = toks(llm, PROMPTS[:4] + PROMPTS[4:], sps + crowd)[:4]
            if k: out['accepted'] = llm.engine.stepper.accepted
    ref = out[0, 'alone']
    R['seeded'] = {f'{k} {m}': sum(a == b for a, b in zip(v, ref)) for (k, m), v in
                   ((key, v) for key, v in out.items() if key != 'accepted')}
    R['seeded']['drafts_accepted'] = out['accepted']
    log('seeded (of 4, == no speculation alone):', R['seeded'])

def penalties():
    kinds = [dict(temperature=0, repetition_penalty=1.3), dict(temperature=0.8, seed=1, presence_penalty=1.5),
             dict(temperature=0.9, seed=2, frequency_penalty=1.0, min_p=0.05), dict(temperature=0, frequency_penalty=0.7)]
    sps = [SamplingParams(max_tokens=64, ignore_eos=True, **kinds[i % 4]) for i in range(8)]
    with llm06() as llm:
        device = toks(llm, PROMPTS, sps)
        overlapped = llm.engine.stepper.launched
        host = toks(llm, PROMPTS, [dataclasses.replace(sp, logprobs=0) for sp in sps])
        free = not llm.engine.penalties.slots
    R['penalties'] = dict(identical=sum(a == b for a, b in zip(device, host)), of=8, overlapped_steps=overlapped,
                          slots_freed=free)
    log('penalties:', R['penalties'])

def lists():
    plain = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    allowed = sorted(set(PROMPTS[4][:16]))
    biased = dict(logit_bias={PROMPTS[2][0]: 5.0, PROMPTS[2][1]: 3.0, PROMPTS[2][2]: -100})
    sps = [dataclasses.replace(plain, **biased) if i % 4 == 1 else
           dataclasses.replace(plain, temperature=0.8, seed=i, allowed_token_ids=allowed) if i % 4 == 3 else plain
           for i in range(8)]
    out = {}
    for name, kw in [('defaults', {}), ('PyTorch path', dict(attention_backend='torch', cuda_graphs='off'))]:
        with llm06(**kw) as llm:
            out[name] = toks(llm, PROMPTS, sps)
            if name == 'defaults': alone = [toks(llm, [PROMPTS[i]], plain)[0] for i in (0, 2, 4, 6)]
    a, b = out['defaults'], out['PyTorch path']
    R['lists'] = dict(identical=sum(x == y for x, y in zip(a, b)), of=8,
                      allowed_only=all(set(a[i]) <= set(allowed) for i in (3, 7)),
                      banned_absent=all(PROMPTS[2][2] not in a[i] for i in (1, 5)),
                      plain_unchanged=[a[i] for i in (0, 2, 4, 6)] == alone)
    log('lists:', R['lists'])

def prompt():
    plain = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    with llm06() as llm:
        outs = [o.outputs[0] for o in llm.generate(PROMPTS, dataclasses.replace(plain, logprobs=0), use_tqdm=False)]
        asked = [p + o.token_ids for p, o in zip(PROMPTS, outs)]
        plp = [o.prompt_logprobs for o in llm.generate(asked, SamplingParams(max_tokens=1, prompt_logprobs=0),
                                                        use_tqdm=False)]
        diff = max(abs(lp[t] - q[len(p) + j][t]) for p, o, q in zip(PROMPTS, outs, plp)
                   for j, (t, lp) in enumerate(zip(o.token_ids, o.logprobs)))
        ban = lambda o: [[o.token_ids[0]], o.token_ids[3:5]]            # its first token, and a pair
        got = toks(llm, PROMPTS, [dataclasses.replace(plain, bad_words_token_ids=ban(o)) if i % 2 else plain
                                  for i, o in enumerate(outs)])
    pair = lambda a, w: any(a[k:k + 2] == w for k in range(len(a) - 1))
    R['prompt'] = dict(prompt_vs_sampled_max_abs=diff,
                       plain_unchanged=all(got[i] == outs[i].token_ids for i in range(0, 8, 2)),
                       banned_absent=all(got[i][0] != outs[i].token_ids[0] and not pair(got[i], outs[i].token_ids[3:5])
                                         for i in range(1, 8, 2)))
    log('prompt:', R['prompt'])

SCHEMA = {'type': 'object', 'properties': {'ok': {'type': 'boolean'}, 'n': {'enum': [1, 2, 3]},
                                          'why': {'type': 'string', 'maxLength': 12}}}
SPECS = [{'json': SCHEMA}, {'regex': r'\d{3}-\d{4}'}, {'choice': [' yes', ' no', ' maybe']}]
VALID = [lambda t: list(json.loads(t)) == ['ok', 'n', 'why'], lambda t: re.fullmatch(r'\d{3}-\d{4}', t),
         lambda t: t in (' yes', ' no', ' maybe')]

def structured():
    plain = SamplingParams(temperature=0, max_tokens=48)
    sps = [dataclasses.replace(plain, structured_outputs=SPECS[i // 2 % 3]) if i % 2 else plain for i in range(8)]
    with llm06() as llm:
        timed = lambda sp: (time.perf_counter(), llm.generate(PROMPTS, sp, use_tqdm=False), time.perf_counter())
        t0, outs, t1 = timed(sps)
        t2, _, t3 = timed(sps)
        t4, _, t5 = timed(plain)
        alone = [toks(llm, [PROMPTS[i]], plain)[0] for i in range(0, 8, 2)]
    with llm06(overlap=False) as ref:                  # steps in order: the structured rows' tokens, unoverlapped
        in_order = [o.outputs[0].token_ids for o in ref.generate(PROMPTS, sps, use_tqdm=False)]
    texts = [o.outputs[0].text for o in outs]
    R['structured'] = dict(valid=sum(bool(VALID[i // 2 % 3](texts[i])) for i in range(1, 8, 2)), of=4,
                           ended=all(outs[i].outputs[0].finish_reason == 'stop' for i in range(1, 8, 2)),
                           plain_unchanged=[outs[i].outputs[0].token_ids for i in range(0, 8, 2)] == alone,
                           overlapped_as_in_order=[o.outputs[0].token_ids for o in outs] == in_order,
                           texts=[texts[i] for i in range(1, 8, 2)], first_s=t1 - t0, again_s=t3 - t2, plain_s=t5 - t4)
    log('structured:', R['structured'])

def memory():
    base = torch.cuda.memory_allocated()
    llm = llm06(torch.bfloat16, gpu_memory_utilization=0.9)
    llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
    held = torch.cuda.memory_allocated() - base
    del llm                                                      # no gc.collect(): nothing may keep it alive
    after = torch.cuda.memory_allocated() - base
    llm = llm06(torch.bfloat16, gpu_memory_utilization=0.9)
    ok = len(toks(llm, PROMPTS[:1], SamplingParams(temperature=0, max_tokens=8))[0]) == 8
    R['memory'] = dict(allocated_gib_while_held=held / 2**30, allocated_gib_after_del=after / 2**30, second_llm_ok=ok)
    log('memory:', R['memory'])
    llm.close()

SECTIONS = dict(fp32=fp32, sharing=sharing, seeded=seeded, penalties=penalties, lists=lists, prompt=prompt,
                structured=structured, memory=memory)
only = [a.split('=', 1)[1].split(',') for a in sys.argv if a.startswith('--only=')]
for fn in [f for k, f in SECTIONS.items() if not only or k in only[0]]: run_section(fn, R, save)
log('done; errors in:', list(R['errors']) or 'none')
