"""The policy's vocabulary: which library paths compute, copy, launch streams, patch, snoop or escape.

`classify_torch` sorts a resolved `torch...` path into one of these categories; the rules and the
analysis read only these names.
"""

from __future__ import annotations

import re


# torch.<name>(...) calls that allocate, reshape or query: allowed in the forward path.
TORCH_ALLOWED_FUNCTIONS = frozenset({
    "empty", "empty_like", "empty_strided", "empty_permuted", "zeros", "zeros_like", "ones", "ones_like",
    "full", "full_like", "arange", "linspace", "tensor", "as_tensor", "asarray", "from_numpy", "scalar_tensor",
    "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "manual_seed", "seed",
    "initial_seed", "get_rng_state", "set_rng_state", "Generator", "device", "dtype", "Size", "is_tensor",
    "is_storage", "is_floating_point", "is_complex", "numel", "finfo", "iinfo", "get_default_dtype",
    "set_default_dtype", "get_default_device", "set_default_device", "no_grad", "enable_grad", "inference_mode",
    "set_grad_enabled", "is_grad_enabled", "is_inference_mode_enabled", "broadcast_shapes", "promote_types",
    "result_type", "can_cast", "reshape", "view_as_real", "view_as_complex", "flatten", "unflatten", "squeeze",
    "unsqueeze", "permute", "transpose", "swapaxes", "swapdims", "movedim", "moveaxis", "t", "narrow", "chunk",
    "split", "tensor_split", "hsplit", "vsplit", "unbind", "broadcast_to", "broadcast_tensors", "atleast_1d",
    "atleast_2d", "atleast_3d", "select", "as_strided", "typename", "get_num_threads", "is_autocast_enabled",
    "use_deterministic_algorithms", "Tensor", "Stream", "Event", "eye", "tril_indices", "triu_indices", "meshgrid",
})
# Copies done by PyTorch: not compute, but worth a warning.
TORCH_DATA_MOVEMENT = frozenset({
    "cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack", "row_stack", "clone",
})
TORCH_CUDA_STREAM = frozenset({"Stream", "stream", "ExternalStream", "set_stream", "StreamContext", "streams"})
TORCH_CUDA_GRAPH = frozenset({"graph", "CUDAGraph", "make_graphed_callables", "graphs"})
TORCH_COMPILE_PREFIXES = ("torch.compile", "torch.jit", "torch._dynamo", "torch._inductor", "torch.export",
                          "torch._export", "torch._lazy")
TORCH_COMPUTE_NAMESPACES = frozenset({"linalg", "special", "fft", "sparse", "nested", "masked"})
ATEN_LIKE_OP_NAMESPACES = frozenset({"aten", "prims", "quantized", "_quantized", "mkldnn", "torchvision", "cudnn",
                                     "fbgemm", "_c10d_functional", "c10d"})
# Private torch helpers that generated Triton code (KernelBook) uses and that compute nothing.
TORCH_PRIVATE_ALLOWED = frozenset({
    "torch._C._cuda_getCurrentRawStream", "torch._C._dynamo.guards.assert_size_stride",
    "torch._C._dynamo.guards._empty_strided_cuda", "torch._C._dynamo.guards._empty_strided_cpu",
    "torch._assert", "torch._check",
})
# nn classes that are parameter holders or no-ops when called.
NN_HOLDER_CLASSES = frozenset({"Parameter", "ParameterList", "ParameterDict", "Buffer", "Identity", "Flatten",
                               "Unflatten", "Module"})
NN_CONTAINER_CLASSES = frozenset({"Sequential", "ModuleList", "ModuleDict"})

FUNCTIONAL_COMPUTE = frozenset({
    "relu", "relu_", "relu6", "gelu", "silu", "elu", "selu", "celu", "leaky_relu", "prelu", "rrelu", "glu",
    "hardtanh", "hardswish", "hardsigmoid", "mish", "softplus", "softsign", "softshrink", "hardshrink",
    "tanhshrink", "threshold", "sigmoid", "tanh", "logsigmoid", "softmax", "softmin", "log_softmax",
    "gumbel_softmax", "normalize", "layer_norm", "group_norm", "batch_norm", "instance_norm",
    "local_response_norm", "rms_norm", "linear", "bilinear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "unfold", "fold", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "max_pool1d", "max_pool2d", "max_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d", "lp_pool1d", "lp_pool2d", "dropout",
    "dropout2d", "dropout3d", "alpha_dropout", "embedding", "embedding_bag", "one_hot", "pad", "interpolate",
    "upsample", "grid_sample", "affine_grid", "pixel_shuffle", "pixel_unshuffle", "cosine_similarity",
    "pairwise_distance", "pdist", "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss",
    "huber_loss", "kl_div", "binary_cross_entropy", "binary_cross_entropy_with_logits", "hinge_embedding_loss",
    "margin_ranking_loss", "triplet_margin_loss", "cosine_embedding_loss", "multi_margin_loss",
    "poisson_nll_loss", "gaussian_nll_loss", "ctc_loss", "scaled_dot_product_attention",
    "multi_head_attention_forward",
})
TORCH_COMPUTE = frozenset({
    "matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "addr", "mv", "dot", "vdot", "einsum",
    "tensordot", "outer", "ger", "inner", "kron", "cross", "cdist", "chain_matmul", "sum", "nansum", "mean",
    "nanmean", "prod", "max", "min", "amax", "amin", "aminmax", "argmax", "argmin", "cumsum", "cumprod", "cummax",
    "cummin", "logsumexp", "logcumsumexp", "std", "var", "std_mean", "var_mean", "norm", "median", "mode", "sort",
    "argsort", "topk", "kthvalue", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "abs",
    "neg", "sign", "pow", "square", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "atan2",
    "erf", "erfc", "erfinv", "sigmoid", "relu", "clamp", "clip", "where", "add", "sub", "mul", "div",
    "true_divide", "floor_divide", "remainder", "fmod", "maximum", "minimum", "floor", "ceil", "round", "trunc",
    "reciprocal", "lerp", "addcmul", "addcdiv", "softmax", "log_softmax", "tril", "triu", "diag", "trace", "all",
    "any", "eq", "ne", "gt", "ge", "lt", "le", "isclose", "allclose", "equal", "isnan", "isinf", "nan_to_num",
    "masked_fill", "index_select", "gather", "scatter", "scatter_add", "scatter_reduce", "take", "flip", "roll",
    "rot90", "repeat_interleave", "tile", "histc", "bincount", "unique", "nonzero", "searchsorted", "bucketize",
    "logical_and", "logical_or", "logical_not", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_not", "logit", "xlogy", "hypot", "lgamma", "digamma", "polygamma", "i0", "sinc", "frac",
    "heaviside", "logaddexp", "logaddexp2", "count_nonzero", "matrix_power", "det", "inverse", "pinverse", "svd",
    "qr", "cholesky", "lu", "solve", "triangular_solve", "cosine_similarity", "pairwise_distance", "pdist",
    "pixel_shuffle", "dropout", "layer_norm", "group_norm", "batch_norm", "instance_norm", "conv1d", "conv2d",
    "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "linear", "gelu", "silu", "hardtanh",
    "selu", "celu", "prelu", "rrelu", "threshold", "softplus", "diff", "cov", "corrcoef", "renorm",
})
COMPUTE_NAMES = FUNCTIONAL_COMPUTE | TORCH_COMPUTE

# Tensor methods that compute (called on a tensor or on anything not known to be something else).
TENSOR_COMPUTE_METHODS = frozenset((TORCH_COMPUTE - {"tensordot", "chain_matmul", "einsum", "cdist"}) | {
    "add_", "sub_", "mul_", "div_", "pow_", "exp_", "log_", "sqrt_", "abs_", "neg_", "clamp_", "clamp_min",
    "clamp_max", "clamp_min_", "clamp_max_", "clip_", "relu_", "sigmoid_", "tanh_", "masked_fill_", "index_add",
    "index_add_", "scatter_", "scatter_add_", "index_put", "index_put_", "put_", "masked_scatter", "masked_select",
    "addmm_", "baddbmm_", "addcmul_", "addcdiv_", "lerp_", "floor_", "ceil_", "round_", "reciprocal_", "rsqrt_",
    "sum_to_size", "absolute", "negative", "multiply", "divide", "subtract", "softmax", "log_softmax", "erf_",
    "hardtanh", "cumsum_", "fmod_", "remainder_", "mish", "nan_to_num_", "apply_", "map_", "map2_",
    "fmax", "fmin", "float_power", "float_power_", "sgn", "sgn_", "copysign", "copysign_", "nextafter", "xlogy_",
    "hypot_", "logaddexp", "heaviside_", "sinc_", "sigmoid", "exp2_", "expm1_", "log1p_", "square_", "erfc_",
    "clamp_max_", "threshold_", "hardtanh_", "leaky_relu", "leaky_relu_", "gelu", "silu", "elu", "softplus",
    "__matmul__", "__rmatmul__", "__imatmul__", "__add__", "__radd__", "__iadd__", "__sub__", "__rsub__",
    "__isub__", "__mul__", "__rmul__", "__imul__", "__truediv__", "__rtruediv__", "__itruediv__",
    "__floordiv__", "__pow__", "__rpow__", "__neg__", "__abs__", "__gt__", "__lt__", "__ge__", "__le__",
    "__and__", "__or__", "__xor__", "__invert__", "__mod__",
})
# Tensor methods that stay allowed even though a same-named torch function computes (reshape-like).
CONTAINER_METHODS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "update", "add", "discard",
                               "sort", "reverse", "copy", "index", "count", "keys", "values", "items", "get",
                               "setdefault"})

LOW_PRECISION_DTYPES = frozenset({
    "torch.float16", "torch.half", "torch.bfloat16", "torch.float8_e4m3fn", "torch.float8_e5m2",
    "torch.float8_e4m3fnuz", "torch.float8_e5m2fnuz", "triton.language.float16", "triton.language.bfloat16",
    "triton.language.float8e4nv", "triton.language.float8e5", "triton.language.float8e4b15",
    "triton.language.float8e4b8", "triton.language.float8e5b16",
})

CONCURRENCY_MODULES = ("threading", "_thread", "multiprocessing", "concurrent", "asyncio", "torch.multiprocessing",
                       "torch.distributed")
INTROSPECTION_MODULES = ("gc", "inspect", "ctypes", "_ctypes", "cffi", "tracemalloc")
INTROSPECTION_NAMES = ("sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "sys.gettrace",
                       "sys.getprofile", "sys.exc_info",
                       # The harness's own instruments: torch's dispatch and function modes (the CPU's compute
                       # account is one) and the Triton interpreter's internals.
                       "torch.utils._python_dispatch", "torch.overrides", "torch._C._get_dispatch_mode",
                       "torch._C._unset_dispatch_mode", "torch._C._set_dispatch_mode", "torch._C._DisableTorchDispatch",
                       "torch._C.DisableTorchFunction", "torch._C.DisableTorchFunctionSubclass",
                       "torch._C._dispatch_tls_set_dispatch_key_excluded", "torch._C._ExcludeDispatchKeyGuard",
                       "torch._C._pop_torch_dispatch_stack", "torch._C._pop_torch_function_stack",
                       "torch._C._len_torch_dispatch_stack", "torch._C._get_dispatch_stack_at",
                       "torch.utils._mode_utils", "torch._dispatch", "triton.runtime.interpreter",
                       "triton._C.libtriton.interpreter")
FRAME_ATTRIBUTES = frozenset({"f_back", "f_locals", "f_globals", "f_code", "f_builtins", "tb_frame", "gi_frame",
                              "cr_frame", "__globals__", "__closure__", "__code__", "__subclasses__"})
# `posix` is what `os` wraps (posix.fork, posix._exit passed as plain names), `faulthandler` can crash the process on
# demand (faulthandler._sigsegv), `multiprocessing` and `_posixsubprocess` start processes.
PROCESS_MODULES = ("subprocess", "socket", "urllib", "http", "requests", "httpx", "ftplib", "smtplib", "pty",
                   "signal", "telnetlib", "paramiko", "webbrowser", "xmlrpc", "posix", "nt", "_posixsubprocess",
                   "faulthandler", "multiprocessing", "concurrent.futures.process")
PROCESS_NAMES = ("os.system", "os.popen", "os.fork", "os.forkpty", "os.kill", "os.killpg", "os._exit", "os.abort",
                 "sys.exit", "os.execl", "os.execle", "os.execlp", "os.execlpe", "os.execv", "os.execve",
                 "os.execvp", "os.execvpe", "os.spawnl", "os.spawnle", "os.spawnlp", "os.spawnlpe", "os.spawnv",
                 "os.spawnve", "os.spawnvp", "os.spawnvpe", "os.posix_spawn", "os.posix_spawnp")
FILE_WRITE_NAMES = ("os.remove", "os.unlink", "os.rename", "os.renames", "os.replace", "os.makedirs", "os.mkdir",
                    "os.rmdir", "os.removedirs", "os.truncate", "os.symlink", "os.link", "os.chmod", "os.utime",
                    "os.write", "shutil", "torch.save", "numpy.save", "numpy.savez", "numpy.savez_compressed",
                    "numpy.savetxt", "pickle.dump", "json.dump")
FILE_WRITE_METHODS = frozenset({"write_text", "write_bytes", "tofile", "mkdir", "touch", "unlink", "rmdir"})
FILE_READ_NAMES = ("torch.load", "numpy.load", "numpy.loadtxt", "numpy.fromfile", "json.load", "os.listdir",
                   "os.scandir", "os.walk", "glob", "tempfile", "pathlib.Path.home", "os.getcwd")
FILE_READ_METHODS = frozenset({"read_text", "read_bytes", "iterdir", "glob", "rglob"})
# Native code in a Triton candidate: whatever compiles or loads C, C++, CUDA or machine code at run time, or hands a
# kernel to a library that does. A Triton candidate's work is its @triton.jit kernels; on the CPU these would run
# as native code beside the interpreter, where the compute account sees only the bytes they leave.
NATIVE_MODULES = ("torch.utils.cpp_extension", "torch.ops.load_library", "torch.classes.load_library",
                  "torch.cuda.jiterator", "triton.runtime.build", "triton.backends", "numpy.ctypeslib", "numpy.f2py",
                  "numpy.distutils", "ctypes", "_ctypes", "cffi", "_cffi_backend", "numba", "cupy", "cupyx",
                  "cupy_backends", "pycuda", "cuda", "cuda_bindings", "nvidia", "Cython", "cython", "pyximport",
                  "llvmlite", "pybind11", "cppyy", "distutils", "setuptools", "imp", "_imp", "jax", "jaxlib", "tvm",
                  "tilelang", "warp", "taichi", "mlir", "cutlass", "nvmath")
# Of those, the names that are also everyday words ("cuda" is a device string): found in imports and attribute
# chains, never as a string.
NATIVE_MODULE_WORDS = frozenset({"cuda", "warp", "nvidia", "imp", "mlir", "cutlass", "cython", "tvm", "jax"})
# Their entry points by attribute or bare name, so a local alias (`u = torch.utils; u.cpp_extension`) or a constant
# string (`getattr(m, "load_inline")`) names them too.
NATIVE_NAMES = frozenset({"cpp_extension", "load_inline", "load_library", "jiterator", "ctypeslib", "f2py", "ctypes",
                          "CDLL", "PyDLL", "cdll", "pydll", "dlopen", "RawKernel", "RawModule", "ElementwiseKernel",
                          "ReductionKernel", "SourceModule", "compile_module_from_src", "create_dynamic",
                          "load_dynamic", "njit", "CUDAExtension", "CppExtension", "BuildExtension"})
DYNAMIC_CODE_MODULES = ("importlib", "runpy", "marshal", "pickle", "dill", "cloudpickle", "code", "codeop",
                        "zipimport", "pkgutil")
DYNAMIC_CODE_NAMES = ("types.FunctionType", "types.CodeType", "types.LambdaType", "types.ModuleType",
                      "pickle.loads", "marshal.loads",
                      # Calls or reads a method or attribute by a name built at run time, like a computed getattr.
                      "operator.methodcaller", "operator.attrgetter", "_operator.methodcaller", "_operator.attrgetter")
DYNAMIC_BUILTINS = frozenset({"exec", "eval", "compile", "__import__"})
TIMER_NAMES = ("time", "timeit", "torch.cuda.Event", "torch.Event", "torch.cuda.Event.elapsed_time",
               "triton.testing")
# Third-party packages a kernel module may import; the standard library is allowed too (its dangerous
# parts have rules of their own). Anything else (the harness's own modules, the problem module, this
# package) is a way to reach the reference or the evaluator.
ALLOWED_THIRD_PARTY = frozenset({"torch", "triton", "numpy", "typing_extensions"})
STDOUT_NAMES = ("sys.stdout", "sys.stderr", "sys.__stdout__", "sys.__stderr__", "logging")


def under(qualname: str | None, prefix: str) -> bool:
    return qualname is not None and (qualname == prefix or qualname.startswith(prefix + "."))


def under_any(qualname: str | None, prefixes: tuple[str, ...]) -> bool:
    return any(under(qualname, p) for p in prefixes)


def runs_module(method: str) -> bool:
    """Whether calling this method of an nn.Module runs its forward."""
    return method in ("forward", "__call__", "_call_impl", "_wrapped_call_impl", "_slow_forward") or "forward" in method


def classify_torch(qn: str) -> str:
    """What a call to this library path does: compute | data_movement | stream | graph | compile |
    concurrency | precision | nn_class | allowed | other (not torch)."""
    if under_any(qn, TORCH_COMPILE_PREFIXES):
        return "compile"
    if not under(qn, "torch"):
        return "other"
    if qn in TORCH_PRIVATE_ALLOWED:
        return "allowed"
    parts = qn.split(".")
    if len(parts) == 1:
        return "allowed"
    head = parts[1]
    if under_any(qn, ("torch.multiprocessing", "torch.distributed")):
        return "concurrency"
    if head == "nn":
        if len(parts) >= 3 and parts[2] == "functional":
            return "compute" if len(parts) >= 4 else "allowed"
        if parts[-1] in FUNCTIONAL_COMPUTE:
            return "compute"
        for i, part in enumerate(parts[2:], start=2):
            if part[:1].isupper():
                if i == len(parts) - 1:
                    return "nn_class"
                if runs_module(parts[i + 1]):
                    return "compute"
                return "allowed"
        return "allowed"
    if head == "ops":
        return "compute" if len(parts) >= 3 and parts[2] in ATEN_LIKE_OP_NAMESPACES else "allowed"
    if head in TORCH_COMPUTE_NAMESPACES:
        return "compute" if len(parts) >= 3 else "allowed"
    if head == "cuda":
        if len(parts) >= 3 and parts[2] in TORCH_CUDA_STREAM:
            return "stream"
        if len(parts) >= 3 and parts[2] in TORCH_CUDA_GRAPH:
            return "graph"
        if len(parts) >= 3 and parts[2] == "amp":
            return "precision"
        return "allowed"
    if head in ("autocast", "amp"):
        return "precision"
    if head in ("set_float32_matmul_precision", "set_flush_denormal"):
        return "precision"
    if head == "Stream":
        return "stream"
    if head == "Tensor":
        return "compute" if len(parts) >= 3 and parts[2] in TENSOR_COMPUTE_METHODS else "allowed"
    if head == "_C":
        return "compute"
    if head.startswith("_"):
        return "compute"
    if len(parts) == 2:
        if head in TORCH_ALLOWED_FUNCTIONS or head[:1].isupper():
            return "allowed"
        if head in TORCH_DATA_MOVEMENT:
            return "data_movement"
        if re.fullmatch(r"(float|int|uint|bfloat|complex|bool|half|double|long|short|cfloat|cdouble)\w*", head):
            return "allowed"
        return "compute"
    # Deeper paths (torch.functional.einsum, torch.nn.modules.conv.F.conv2d...): judge by the op's name.
    return "compute" if parts[-1] in COMPUTE_NAMES else "allowed"
