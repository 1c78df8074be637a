"""Small sizes, per suite, for the problems whose sizes `sizing.infer_small_sizes` cannot find.

Inference shrinks module-level size constants; it cannot see a size written as a literal inside a function
(kernrl's `get_init_inputs(): return [1000, 32]` for PBKDF2's iteration count, a 256x256 ray grid built inside
`get_inputs`), nor relations the model needs between sizes it shrinks separately (MLA's LoRA ranks and head
dims). For those the table gives the small sizes by the problem's id in its suite's own form (kernrl:
`L{level}_{file stem}`). A value for a function name (`get_init_inputs`) replaces that function: by one that
returns the value, or by the value itself where it is a function's source (`def get_inputs(): ...`, for sizes
written inside it); an empty entry keeps the problem's own sizes (it is fast enough on the CPU as written).

An entry is looked up by the problem's file stem: a problem file that is renamed upstream falls back to
inference, and one whose constants change keeps the overrides that still name something in it.
"""

from __future__ import annotations

_RAY_GRID_8X4 = """def get_inputs():
    # Pinhole camera at z=5 looking at the origin through an 8x4 grid; spheres placed at random.
    u, v = torch.meshgrid(torch.linspace(-1, 1, 8), torch.linspace(-1, 1, 4), indexing="ij")
    origins = torch.zeros(num_rays, 3)
    origins[:, 2] = 5.0
    directions = torch.stack([u.flatten(), v.flatten(), -torch.ones(num_rays)], dim=1)
    directions = directions / directions.norm(dim=1, keepdim=True)
    centers = torch.randn(num_spheres, 3) * 2
    radii = torch.rand(num_spheres) * 0.5 + 0.1
    return [origins, directions, centers, radii]
"""

KERNRL_SMALL_SIZES: dict[str, dict[str, object]] = {
    # The max of torch.rand is about 1.0 whatever the seed: kept large enough that it is so at the CPU size too, so
    # the evaluator's verdict there (no verdict: ones passes) is the real size's, not a matter of 32 draws.
    "L9_3_Reduction_Max": {"array_size": 1 << 16},
    # Head counts and LoRA ranks shrink together: q_b_proj is heads x (nope + rope) wide.
    "L4_1_DeepSeek_MLA": {
        "batch_size": 2, "seq_len": 16, "hidden_size": 64, "num_attention_heads": 4, "q_lora_rank": 32,
        "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
        "max_position_embeddings": 64,
    },
    # hidden_size = heads x head_dim; 4 query heads per key/value head, as in the real problem.
    "L4_3_GroupedQueryAttention": {
        "batch_size": 2, "seq_len": 16, "hidden_size": 128, "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 16, "max_position_embeddings": 64,
    },
    # The rays come from a 256x256 grid written inside get_inputs (num_rays must equal it), and the reference
    # loops over rays in Python (minutes on the CPU): the same camera and scene on an 8x4 grid.
    "L6_1_RayTracing_Spheres": {"num_rays": 32, "num_spheres": 16, "get_inputs": _RAY_GRID_8X4},
    # The output size is written in get_init_inputs: a smaller image downsampled to a smaller one.
    "L7_6_Resample_Bilinear": {"input_height": 32, "input_width": 24, "get_init_inputs": [12, 16]},
    # n_fft and hop are written in get_init_inputs; the signal keeps several frames of the smaller window.
    "L7_8_STFT": {"signal_length": 1024, "get_init_inputs": [128, 32, "hann"]},
    # Blocks of 8 searched +-4 pixels: 4x4 blocks of a 32x32 frame (the real 16/16 needs frames far larger).
    "L8_1_MotionEstimation_BlockMatch": {"frame_height": 32, "frame_width": 32, "get_init_inputs": [8, 4]},
    # The filter changes only pixels at block edges whose steps are below its thresholds, a few per thousand of
    # a noise frame: 16x16 has none, so a candidate returning its input would pass. 64x128 keeps several.
    "L8_7_DeblockingFilter": {"frame_height": 64, "frame_width": 128},
    # Each 64-byte block is hashed in Python (about 50 ms on the CPU): 4 messages, not inference's 16.
    "L10_2_SHA256_Batch": {"batch_size": 4},
    # The iteration count is written in get_init_inputs (1000 HMAC rounds take seconds on the CPU); same key length.
    "L10_6_PBKDF2": {"get_init_inputs": [3, 32]},
    # One 64-bit limb of a value below 2**62 (the limbs are int64: the problem's own 256 bits overflow them);
    # 16 bits would make small moduli, where a result of 1 is common enough for `ones` to pass.
    "L10_8_ModularExponentiation": {"num_bits": 62},
}

SUITE_SMALL_SIZES: dict[str, dict[str, dict[str, object]]] = {"kernrl": KERNRL_SMALL_SIZES}


def suite_small_sizes(suite: str, suite_id: str) -> dict[str, object] | None:
    """The table's small sizes for a problem (None: not in the table, infer them)."""
    table = SUITE_SMALL_SIZES.get(suite, {})
    return dict(table[suite_id]) if suite_id in table else None
