__version__ = "0.1.0"

_API = {'LLM': 'minillm.engine', 'SamplingParams': 'minillm.sampling', 'load_model': 'minillm.loading'}

def __getattr__(name):
    "`from minillm import LLM, SamplingParams, load_model`, imported on first use."
    if name in _API:
        import importlib
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'minillm' has no attribute {name!r}")
