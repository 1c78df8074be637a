"""Builders of small retrieval corpora in the exact schemas of GPUMODE/KernelBook and
SakanaAI/AI-CUDA-Engineer-Archive, with the bad rows real dumps contain.

Content covers softmax, relu, matmul and conv so retrieval quality can be asserted, plus copies of
KernelBench references (near-duplicates without labels) so the leak filter can be asserted.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from kernelbench_rl.problems import Problem

# -- KernelBench-style references used as queries ---------------------------------------------------
SOFTMAX_PROBLEM_SOURCE = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        """Simple model that performs a Softmax activation."""

        def __init__(self):
            super(Model, self).__init__()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(x, dim=1)


    batch_size = 16
    dim = 16384


    def get_inputs():
        x = torch.randn(batch_size, dim)
        return [x]


    def get_init_inputs():
        return []
    ''')

MATMUL_PROBLEM_SOURCE = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        """Simple model that performs a single square matrix multiplication (C = A * B)."""

        def __init__(self):
            super(Model, self).__init__()

        def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
            return torch.matmul(A, B)


    N = 2048


    def get_inputs():
        A = torch.randn(N, N)
        B = torch.randn(N, N)
        return [A, B]


    def get_init_inputs():
        return []
    ''')

CONV_PROBLEM_SOURCE = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        """Performs a standard 2D convolution with a square kernel."""

        def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
            super(Model, self).__init__()
            self.conv2d = nn.Conv2d(in_channels, out_channels, (kernel_size, kernel_size))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv2d(x)


    batch_size = 16
    in_channels = 3
    out_channels = 64
    kernel_size = 3


    def get_inputs():
        x = torch.randn(batch_size, in_channels, 256, 256)
        return [x]


    def get_init_inputs():
        return [in_channels, out_channels, kernel_size]
    ''')

RELU_PROBLEM_SOURCE = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        """Simple model that performs a ReLU activation."""

        def __init__(self):
            super(Model, self).__init__()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x)


    batch_size = 16
    dim = 16384


    def get_inputs():
        x = torch.randn(batch_size, dim)
        return [x]


    def get_init_inputs():
        return []
    ''')


def softmax_problem() -> Problem:
    return Problem(level=1, number=23, name="23_Softmax", source=SOFTMAX_PROBLEM_SOURCE, origin="inline")


def matmul_problem() -> Problem:
    return Problem(level=1, number=1, name="1_Square_matrix_multiplication_", source=MATMUL_PROBLEM_SOURCE, origin="inline")


def conv_problem() -> Problem:
    return Problem(level=1, number=63, name="63_conv_standard_2D", source=CONV_PROBLEM_SOURCE, origin="inline")


def _bundled_source(problem_id: str) -> str:
    from kernelbench_rl.problems import get_problem

    return get_problem(problem_id).source


def relu_holdout_problem() -> Problem:
    return Problem(level=1, number=19, name="19_ReLU", source=RELU_PROBLEM_SOURCE, origin="inline")


# -- KernelBook rows --------------------------------------------------------------------------------
def _kb_module(class_name: str, init: str, forward: str, inputs: str, init_inputs: str = "[[], {}]") -> str:
    return (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
        f"class {class_name}(nn.Module):\n\n"
        f"    def __init__(self{init[0]}):\n        super().__init__()\n{init[1]}\n"
        f"    def forward(self, {forward[0]}):\n        {forward[1]}\n\n\n"
        f"def get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return {init_inputs}\n"
    )


def _triton(name: str, body: str) -> str:
    return (
        "import torch\nimport triton\nimport triton.language as tl\n"
        "from torch._inductor.runtime.triton_heuristics import grid\n\n\n"
        f"@triton.jit\ndef triton_{name}(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):\n"
        "    xoffset = tl.program_id(0) * XBLOCK\n    xindex = xoffset + tl.arange(0, XBLOCK)[:]\n"
        f"    xmask = xindex < xnumel\n{textwrap.indent(body, '    ')}\n\n\n"
        f"class {name.title().replace('_', '')}New(torch.nn.Module):\n"
        "    def forward(self, input_0):\n        buf0 = torch.empty_like(input_0)\n"
        f"        triton_{name}[grid(input_0.numel())](input_0, buf0, input_0.numel(), XBLOCK=128)\n"
        "        return buf0\n"
    )


_SOFTMAX_TRITON = _triton("per_fused__softmax_0", (
    "tmp0 = tl.load(in_ptr0 + xindex, xmask)\ntmp1 = tl.max(tmp0, 0)\ntmp2 = tl.exp(tmp0 - tmp1)\n"
    "tmp3 = tl.sum(tmp2, 0)\ntl.store(out_ptr0 + xindex, tmp2 / tmp3, xmask)"))
_SOFTMAX_T_TRITON = _triton("per_fused__softmax_div_0", (
    "tmp0 = tl.load(in_ptr0 + xindex, xmask)\ntmp1 = tmp0 * 0.5\ntmp2 = tl.max(tmp1, 0)\n"
    "tmp3 = tl.exp(tmp1 - tmp2)\ntl.store(out_ptr0 + xindex, tmp3 / tl.sum(tmp3, 0), xmask)"))
_RELU_TRITON = _triton("poi_fused_relu_0", (
    "tmp0 = tl.load(in_ptr0 + xindex, xmask)\ntmp1 = tl.full([1], 0, tl.int32)\n"
    "tmp2 = triton_helpers.maximum(tmp1, tmp0)\ntl.store(out_ptr0 + xindex, tmp2, xmask)"))
_LEAKY_TRITON = _triton("poi_fused_leaky_relu_0", (
    "tmp0 = tl.load(in_ptr0 + xindex, xmask)\ntmp1 = tmp0 > 0.0\ntmp2 = tmp0 * 0.01\n"
    "tl.store(out_ptr0 + xindex, tl.where(tmp1, tmp0, tmp2), xmask)"))
_MATMUL_TRITON = _triton("tem_fused_mm_0", (
    "acc = tl.zeros((XBLOCK, XBLOCK), dtype=tl.float32)\nfor k in range(0, xnumel, XBLOCK):\n"
    "    a = tl.load(in_ptr0 + k)\n    b = tl.load(in_ptr0 + k + xnumel)\n    acc += tl.dot(a, b)\n"
    "tl.store(out_ptr0 + xindex, acc, xmask)"))
_CONV_TRITON = _triton("poi_fused_convolution_0", (
    "x1 = xindex // 16 % 4\ntmp0 = tl.load(in_ptr0 + xindex, xmask)\ntmp1 = tl.load(in_ptr0 + x1, xmask)\n"
    "tl.store(out_ptr0 + xindex, tmp0 + tmp1, xmask)"))
_GELU_TRITON = _triton("poi_fused_gelu_0", (
    "tmp0 = tl.load(in_ptr0 + xindex, xmask)\ntmp1 = 0.5 * tmp0\ntmp2 = tmp0 * 0.7071067811865476\n"
    "tmp3 = libdevice.erf(tmp2) + 1.0\ntl.store(out_ptr0 + xindex, tmp1 * tmp3, xmask)"))
_LAYERNORM_TRITON = _triton("per_fused_native_layer_norm_0", (
    "tmp0 = tl.load(in_ptr0 + xindex, xmask)\ntmp1 = tl.sum(tmp0, 0) / xnumel\ntmp2 = tmp0 - tmp1\n"
    "tmp3 = tl.sum(tmp2 * tmp2, 0) / xnumel\ntl.store(out_ptr0 + xindex, tmp2 * libdevice.rsqrt(tmp3 + 1e-05), xmask)"))

KB_SOFTMAX_PY = _kb_module("SoftmaxLayer", ("", ""), ("x", "return F.softmax(x, dim=-1)"), "[torch.rand([4, 4, 4, 4])]")
KB_SOFTMAX_T_PY = _kb_module("TemperatureSoftmax", (", temperature=2.0", "        self.temperature = temperature\n"),
                             ("logits", "return torch.softmax(logits / self.temperature, dim=1)"),
                             "[torch.rand([4, 4, 4, 4])]")
KB_RELU_PY = _kb_module("ReLULayer", ("", ""), ("x", "return F.relu(x)"), "[torch.rand([4, 4, 4, 4])]")
KB_LEAKY_PY = _kb_module("LeakyActivation", ("", ""), ("x", "return F.leaky_relu(x, 0.01)"), "[torch.rand([4, 4, 4, 4])]")
KB_MATMUL_PY = _kb_module("MatMul", ("", ""), ("a, b", "return torch.matmul(a, b)"),
                          "[torch.rand([4, 4, 4, 4]), torch.rand([4, 4, 4, 4])]")
KB_CONV_PY = _kb_module("ConvBlock", (", in_ch=4, out_ch=4", "        self.conv = nn.Conv2d(in_ch, out_ch, kernel_size=3, padding=1)\n"),
                        ("x", "return self.conv(x)"), "[torch.rand([4, 4, 64, 64])]", "[[], {'in_ch': 4, 'out_ch': 4}]")
KB_GELU_PY = _kb_module("GELUAct", ("", ""), ("x", "return F.gelu(x)"), "[torch.rand([4, 4, 4, 4])]")
KB_LAYERNORM_PY = _kb_module("LayerNorm2", (", features=4", "        self.norm = nn.LayerNorm(features)\n"),
                             ("x", "return self.norm(x)"), "[torch.rand([4, 4, 4, 4])]", "[[], {'features': 4}]")


def _kb_row(uuid: int, entry: str, python_code: Any, triton_code: Any, **extra: Any) -> dict[str, Any]:
    row = {
        "entry_point": entry, "original_triton_code": triton_code, "python_code": python_code,
        "triton_code": triton_code, "repo_name": f"someone/repo{uuid}", "module_name": entry,
        "synthetic": False, "uuid": uuid, "licenses": ["MIT"], "stars": 3, "sha": f"{uuid:040x}",
        "repo_link": f"https://github.com/someone/repo{uuid}/tree/{uuid:040x}",
    }
    row.update(extra)
    return row


def kernelbook_rows() -> list[dict[str, Any]]:
    """Good rows (8) + a copy of the softmax and ReLU references (2) + bad rows (5)."""
    reformatted_dup = "# same kernel, re-commented and re-indented\n" + _SOFTMAX_TRITON.replace("\n\n\n", "\n\n")
    return [
        _kb_row(1, "SoftmaxLayer", KB_SOFTMAX_PY, _SOFTMAX_TRITON),
        _kb_row(2, "TemperatureSoftmax", KB_SOFTMAX_T_PY, _SOFTMAX_T_TRITON),
        _kb_row(3, "ReLULayer", KB_RELU_PY, _RELU_TRITON),
        _kb_row(4, "LeakyActivation", KB_LEAKY_PY, _LEAKY_TRITON),
        _kb_row(5, "MatMul", KB_MATMUL_PY, _MATMUL_TRITON),
        _kb_row(6, "ConvBlock", KB_CONV_PY, _CONV_TRITON),
        _kb_row(7, "GELUAct", KB_GELU_PY, _GELU_TRITON),
        _kb_row(8, "LayerNorm2", KB_LAYERNORM_PY, _LAYERNORM_TRITON),
        # Unlabelled copies of KernelBench references: only the near-duplicate check can catch them.
        _kb_row(9, "Model", SOFTMAX_PROBLEM_SOURCE, _triton("per_fused__softmax_copy", "tmp0 = tl.load(in_ptr0 + xindex, xmask)")),
        # A copy of a held-out bundled reference (L1/32 is held out by the default id-hashed split).
        _kb_row(10, "Model", _bundled_source("L1/32"), _triton("poi_fused_hardtanh_copy", "tmp0 = tl.load(in_ptr0 + xindex, xmask)")),
        # Bad rows.
        _kb_row(11, "Empty", KB_RELU_PY, "   \n"),
        _kb_row(12, "Missing", None, _GELU_TRITON + "\n# other"),
        _kb_row(13, "Huge", KB_GELU_PY, _GELU_TRITON + "\n" + "# padding line\nx = 1\n" * 4000),
        _kb_row(14, "SoftmaxDup", KB_SOFTMAX_PY, reformatted_dup),
        _kb_row(15, "Missing2", KB_RELU_PY, None),
    ]


KERNELBOOK_GOOD = 10
KERNELBOOK_SKIPS = {"empty_code": 1, "missing_field": 2, "too_long": 1, "duplicate": 1}


# -- Sakana rows ------------------------------------------------------------------------------------
def _cuda(name: str, body: str) -> str:
    return textwrap.dedent(f'''\
        #include <torch/extension.h>
        #include <cuda_runtime.h>

        __global__ void {name}_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {{
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            {body}
        }}

        torch::Tensor forward(torch::Tensor x) {{
            auto y = torch::empty_like(x);
            int n = x.numel();
            {name}_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
            return y;
        }}

        PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{
            m.def("forward", &forward, "{name} forward (CUDA)");
        }}
        ''')


GEMM_SOFTMAX_SOURCE = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        """Linear layer followed by a scaled softmax over the features."""

        def __init__(self, in_features, out_features, scale):
            super(Model, self).__init__()
            self.gemm = nn.Linear(in_features, out_features)
            self.scale = scale

        def forward(self, x):
            x = self.gemm(x)
            return torch.softmax(x * self.scale, dim=1)


    batch_size = 128
    in_features = 1024
    out_features = 512
    scale = 2.0


    def get_inputs():
        return [torch.randn(batch_size, in_features)]


    def get_init_inputs():
        return [in_features, out_features, scale]
    ''')


def _sakana_row(index: int, level: Any, task: Any, op: str, module: Any, cuda: Any, *, correct: Any = True,
                speedup: Any = 1.3) -> dict[str, Any]:
    return {
        "Op_Name": op, "Level_ID": level, "Task_ID": task, "Kernel_Name": f"{op.lower()}_v{index}",
        "CUDA_Runtime": 0.02, "PyTorch_Native_Runtime": 0.026, "PyTorch_Compile_Runtime": 0.03,
        "CUDA_Speedup_Native": speedup, "CUDA_Speedup_Compile": 1.1, "CUDA_Code": cuda,
        "PyTorch_Code_Module": module, "PyTorch_Code_Functional": module, "Correct": correct,
        "Max_Diff": 1e-6, "Error": None, "NCU_Profile": "", "Torch_Profile": "", "Clang_Tidy": "",
        "__index_level_0__": index,
    }


_SOFTMAX_CUDA_BODY = "if (i < n) { float m = x[0]; for (int j = 0; j < n; ++j) m = fmaxf(m, x[j]); y[i] = __expf(x[i] - m); }"


def sakana_rows() -> dict[str, list[dict[str, Any]]]:
    """level_1: good rows incl. the softmax task (23) and the holdout ReLU task (19); level_2: a fused
    softmax; both with bad rows (Correct=False, absurd and NaN speedups, empty code, missing ids,
    duplicate, over-long code)."""
    level_1 = [
        _sakana_row(0, 1, 23, "23_Softmax", SOFTMAX_PROBLEM_SOURCE, _cuda("softmax", _SOFTMAX_CUDA_BODY)),
        _sakana_row(1, 1, 19, "19_ReLU", RELU_PROBLEM_SOURCE, _cuda("relu", "if (i < n) y[i] = fmaxf(x[i], 0.f);")),
        _sakana_row(2, 1, 1, "1_Square_matrix_multiplication_", MATMUL_PROBLEM_SOURCE,
                    _cuda("matmul", "float acc = 0.f; for (int k = 0; k < n; ++k) acc += x[k] * x[k + i]; y[i] = acc;")),
        _sakana_row(3, 1, 63, "63_conv_standard_2D", CONV_PROBLEM_SOURCE,
                    _cuda("conv2d", "float acc = 0.f; for (int k = 0; k < 9; ++k) acc += x[i + k]; y[i] = acc;"),
                    speedup=1e6),  # absurd speedup: capped
        # KernelBench L1/10 is not bundled, but the id-hashed split holds it out of the full benchmark.
        _sakana_row(10, 1, 10, "10_3D_tensor_matrix_multiplication", MATMUL_PROBLEM_SOURCE.replace(
            "torch.matmul(A, B)", "torch.matmul(A, B.unsqueeze(0)).squeeze(0)"),
                    _cuda("matmul3d", "float acc = 0.f; for (int k = 0; k < n; ++k) acc += x[k]; y[i] = acc;")),
        # Bad rows.
        _sakana_row(4, 1, 23, "23_Softmax", SOFTMAX_PROBLEM_SOURCE, _cuda("softmax_bad", "y[i] = 0.f;"), correct=False),
        _sakana_row(5, 1, 1, "1_Square_matrix_multiplication_", MATMUL_PROBLEM_SOURCE, "", speedup=1.0),
        _sakana_row(6, None, 19, "19_ReLU", RELU_PROBLEM_SOURCE, _cuda("relu_noid", "y[i] = x[i];")),
        _sakana_row(7, 1, 19, "19_ReLU", RELU_PROBLEM_SOURCE,
                    "// duplicate with other comments\n" + _cuda("relu", "if (i < n) y[i] = fmaxf(x[i], 0.f);")),
        _sakana_row(8, 1, 19, "19_ReLU", RELU_PROBLEM_SOURCE, _cuda("relu_nan", "y[i] = x[i];"), speedup=float("nan")),
        _sakana_row(9, 1, 19, "19_ReLU", RELU_PROBLEM_SOURCE, _cuda("relu_huge", "y[i] = x[i];" + " " * 50_000 + "//")),
    ]
    level_2 = [
        _sakana_row(100, 2, 23, "23_Gemm_Scale_Softmax", GEMM_SOFTMAX_SOURCE, _cuda("gemm_softmax", _SOFTMAX_CUDA_BODY + " y[i] *= 2.f;")),
        _sakana_row(101, 2, 23, "23_Gemm_Scale_Softmax", GEMM_SOFTMAX_SOURCE, _cuda("gemm_softmax_slow", "y[i] = x[i];"),
                    correct=False),
    ]
    return {"level_1": level_1, "level_2": level_2}


SAKANA_GOOD = {"level_1": 5, "level_2": 1}
SAKANA_SKIPS = {"not_correct": 2, "empty_code": 1, "missing_field": 1, "duplicate": 1, "invalid_speedup": 1, "too_long": 1}


# -- writers ----------------------------------------------------------------------------------------
def _kernelbook_features():
    import datasets

    return datasets.Features({
        "entry_point": datasets.Value("string"), "original_triton_code": datasets.Value("string"),
        "python_code": datasets.Value("string"), "triton_code": datasets.Value("string"),
        "repo_name": datasets.Value("string"), "module_name": datasets.Value("string"),
        "synthetic": datasets.Value("bool"), "uuid": datasets.Value("int64"),
        "licenses": datasets.Sequence(datasets.Value("string")), "stars": datasets.Value("int64"),
        "sha": datasets.Value("string"), "repo_link": datasets.Value("string"),
    })


def _sakana_features():
    import datasets

    text = datasets.Value("string")
    real = datasets.Value("float64")
    return datasets.Features({
        "Op_Name": text, "Level_ID": datasets.Value("int64"), "Task_ID": datasets.Value("int64"), "Kernel_Name": text,
        "CUDA_Runtime": real, "PyTorch_Native_Runtime": real, "PyTorch_Compile_Runtime": real,
        "CUDA_Speedup_Native": real, "CUDA_Speedup_Compile": real, "CUDA_Code": text, "PyTorch_Code_Module": text,
        "PyTorch_Code_Functional": text, "Correct": datasets.Value("bool"), "Max_Diff": real, "Error": text,
        "NCU_Profile": text, "Torch_Profile": text, "Clang_Tidy": text, "__index_level_0__": datasets.Value("int64"),
    })


def write_kernelbook(folder: Path, fmt: str = "disk") -> Path:
    """KernelBook fixture as a save_to_disk DatasetDict ('disk') or hub-style parquet ('parquet')."""
    import datasets

    dataset = datasets.Dataset.from_list(kernelbook_rows(), features=_kernelbook_features())
    folder = Path(folder)
    if fmt == "disk":
        datasets.DatasetDict({"train": dataset}).save_to_disk(str(folder))
    else:
        (folder / "data").mkdir(parents=True, exist_ok=True)
        dataset.to_parquet(str(folder / "data" / "train-00000-of-00001.parquet"))
    return folder


def write_sakana(folder: Path, fmt: str = "disk") -> Path:
    import datasets

    splits = {name: datasets.Dataset.from_list(rows, features=_sakana_features()) for name, rows in sakana_rows().items()}
    folder = Path(folder)
    if fmt == "disk":
        datasets.DatasetDict(splits).save_to_disk(str(folder))
    else:
        (folder / "data").mkdir(parents=True, exist_ok=True)
        for name, dataset in splits.items():
            dataset.to_parquet(str(folder / "data" / f"{name}-00000-of-00001.parquet"))
    return folder
