"""spattn: training-free sparse attention on the CPU, from Python.

    import spattn
    out = spattn.attention(q, k, v, method="blasst:lambda=1e-3")          # flash-attn layout
    out, report = spattn.attention(q, k, v, method="vertical_slash", return_report=True)

A thin layer over the C++ library: numpy arrays and CPU torch tensors are read in place
(torch CUDA tensors too, on the GPU path of a CUDA build),
methods are the command line's spec strings, and the tools (workloads, metrics, calibration,
bench records) are the library's own. Figures: spattn.plot (matplotlib). With torch 2.1 or newer,
spattn.attention is also the torch operator torch.ops.spattn.attention (torch.compile traces it
without a graph break). `python -m spattn VERB` runs the command line.
"""
from . import _torch_op, metrics
from ._attention import attention, block_mask, method_catalog
from ._core import __version__, method_names, simd_target
from ._tools import Workload, bench, load_qkv, save_qkv, workload
from .calibration import calibrate, evaluate_calibration, lambda_for, load_calibration

__all__ = ["attention", "block_mask", "method_catalog", "method_names", "simd_target",
           "workload", "Workload", "load_qkv", "save_qkv", "bench", "calibrate",
           "evaluate_calibration", "lambda_for", "load_calibration", "metrics", "plot"]

_torch_op.register()  # where torch is already imported; else at the first call with tensors


def __getattr__(name):
    # spattn.plot imports matplotlib: only when asked for.
    if name == "plot":
        import importlib
        return importlib.import_module(".plot", __name__)
    raise AttributeError(f"module 'spattn' has no attribute {name!r}")
