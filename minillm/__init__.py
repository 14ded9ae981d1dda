__version__ = "0.1.0"

_API = {'LLM': 'minillm.llm', 'LLMEngine': 'minillm.engine', 'EngineConfig': 'minillm.engine',
        'SamplingParams': 'minillm.sampling', 'load_model': 'minillm.loading'}
# the chapters that plug into the engine when imported: kernels, graphs, speculation, int8
_PLUGINS = ('minillm.kernels.attention', 'minillm.kernels.gemv', 'minillm.kernels.decode',
            'minillm.kernels.persistent', 'minillm.cuda_graphs', 'minillm.speculative', 'minillm.quant')

def load_plugins():
    "Import every plugin chapter (a chapter whose dependencies are missing, e.g. no Triton, is skipped)."
    import importlib
    for m in _PLUGINS:
        try: importlib.import_module(m)
        except ImportError: pass

def __getattr__(name):
    "`from minillm import LLM, SamplingParams, load_model`, imported on first use, with every plugin chapter."
    if name in _API:
        import importlib
        load_plugins()
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'minillm' has no attribute {name!r}")
